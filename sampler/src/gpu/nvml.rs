//! NVIDIA GPUs through NVML (nvml-wrapper 0.13), bounded in time.
//!
//! # Why a worker thread
//! An NVML call can take seconds under load and can hang outright when a GPU or the driver is in
//! trouble (nvidia-smi taking over 2 s is common on busy nodes). So every NVML call runs in ONE
//! dedicated worker thread that owns the `Nvml` handle; the monitor sends it a request per sample
//! and waits on a channel until the sample's deadline:
//! - answered in time: the values are used;
//! - deadline passed: that sample's devices are `None` (an `nvml_timeout` event), the monitor moves
//!   on; while the worker is still busy no new request is sent (no queue, no second thread); a late
//!   answer is discarded and the next sample proceeds normally;
//! - the job ends meanwhile (the monitor sets its [`Cutoff`]): the wait ends there as at the
//!   deadline, so the monitor can still take its last sample and write its end record;
//! - stuck for longer than [`NvmlConfig::give_up_after`] (or NVML init/discovery overran the
//!   deadline given to [`GpuBackend::open`]): NVML is given up for the job (`nvml_gave_up`): at
//!   most one stuck thread is ever left behind, never more.
//!
//! NVML is initialised once per backend (per job) and a failure is cached: a node without the
//! driver or library is normal ([`OpenResult::quiet`]), not an error.
//!
//! # What is read (C symbols, checked against nvml-wrapper 0.13's `nvml_sym` calls)
//! - init: `nvmlInit_v2`, `nvmlSystemGetDriverVersion`; `nvmlShutdown` at the end (its absence
//!   would panic in nvml-wrapper's `Drop`: the handle is kept in `ManuallyDrop` and shut down
//!   explicitly, so a panic in the worker can never double-panic);
//! - discovery: `nvmlDeviceGetCount_v2`, `nvmlDeviceGetHandleByIndex_v2` (per-index errors are
//!   skipped: inside the job's devices cgroup NVML can open only the job's GPUs),
//!   `nvmlDeviceGetMinorNumber`, `nvmlDeviceGetUUID`, `nvmlDeviceGetPciInfo_v3`,
//!   `nvmlDeviceGetName`, `nvmlDeviceGetMemoryInfo_v2`, `nvmlDeviceGetMigMode`,
//!   `nvmlDeviceGetMaxMigDeviceCount`, `nvmlDeviceGetMigDeviceHandleByIndex`;
//! - per sample: `nvmlDeviceGetUtilizationRates`, `nvmlDeviceGetMemoryInfo_v2`,
//!   `nvmlDeviceGetPowerUsage` (mW), `nvmlDeviceGetTotalEnergyConsumption` (mJ since driver load),
//!   `nvmlDeviceGetCurrentClocksThrottleReasons`, `nvmlDeviceGetComputeRunningProcesses_v3`
//!   (called twice: count, then fill);
//! - per sample and per drain (every [`super::monitor::BackendConfig::drain_interval`] between
//!   samples): `nvmlDeviceGetSamples` for `NVML_GPU_UTILIZATION_SAMPLES` and
//!   `NVML_MEMORY_UTILIZATION_SAMPLES` and `nvmlDeviceGetProcessUtilization`, each since the
//!   newest timestamp it answered before (each called twice: count, then fill). The driver keeps
//!   one utilization sample per 200 ms, 71 of them on an H100 (docs/gpu.md), so a drain every 5 s
//!   misses none. Right after discovery one drain is thrown away: what the buffer held then
//!   predates the job. A device whose buffer answers NOT_SUPPORTED is drained with
//!   `nvmlDeviceGetUtilizationRates` instead (a point read, flagged as such in the bucket); one
//!   whose per-process call does has no job share (`None`). `NOT_FOUND` means no new sample.
//!
//! - SM activity and the node's health (docs/gpu.md, "SM activity"): at open, per GPU (not per
//!   MIG instance), `nvmlGpmQueryDeviceSupport` and, where GPM is supported (Hopper and later),
//!   two `nvmlGpmSampleAlloc` buffers, kept for the job and freed at its end (`nvmlGpmSampleFree`);
//!   `nvmlEventSetCreate` and `nvmlDeviceRegisterEvents` for XID errors, one set per device;
//!   per sample `nvmlGpmSampleGet` into one buffer and `nvmlGpmMetricsGet` between it and the
//!   other (the interval since the last sample: SM activity, SM occupancy, any tensor pipe, DRAM
//!   bandwidth), `nvmlDeviceGetClockInfo` (SM and memory), `nvmlDeviceGetViolationStatus`
//!   (power, thermal), `nvmlDeviceGetTotalEccErrors` (volatile, corrected and uncorrected); per
//!   drain `nvmlEventSetWait_v2` with a timeout of 0 (never blocks) until it has nothing, at
//!   most [`XID_POLL_MAX`] events a drain. What a device lacks is said once in the data notes.
//! - For GPUs without GPM, DCGM's profiling fields where a host engine runs ([`super::dcgm`]):
//!   opened after the GPM query, read at every drain and sample, in this thread.
//!
//! `NOT_SUPPORTED` (MIG utilization, old GPUs' energy) → `None`. `GPU_IS_LOST` → the device is
//! `None` from then on and a `gpu_lost` event is recorded. Any other error → `None` and one
//! `nvml_error` event per device and call.

use super::assign::{resolve, InventoryDevice, Wanted};
use super::dcgm::{Dcgm, DcgmConfig};
use super::{BackendDrain, DeviceDrain, ProcessUtil, UtilSource, XidReport};
use super::{
    BackendSample, Cutoff, DeviceSample, GpuBackend, GpuDevice, GpuEvent, GpuIdentity, GpuKind,
    OpenResult,
};
use crate::spool::EventKind;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{
    Clock, EccCounter, MemoryError, PerformancePolicy, Sampling,
};
use nvml_wrapper::enums::device::{SampleValue, UsedGpuMemory};
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::{nvml_try, NvmlError};
use nvml_wrapper::{Device, EventSet, GpmSample, Nvml};
use std::collections::HashSet;
use std::mem::ManuallyDrop;
use std::path::PathBuf;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::time::{Duration, Instant};

/// XID events read per device and drain at most (the rest wait for the next drain).
pub const XID_POLL_MAX: usize = 64;
/// XID events kept per device between two samples (all are counted).
const XID_KEEP: usize = 32;
/// The GPM metrics read, in [`GpmFigures`] order.
const GPM_METRICS: [GpmMetricId; 4] = [
    GpmMetricId::SmUtil,
    GpmMetricId::SmOccupancy,
    GpmMetricId::AnyTensorUtil,
    GpmMetricId::DramBwUtil,
];

/// What `Nvml::init()` loads when no path is configured.
pub const DEFAULT_NVML_LIB: &str = "libnvidia-ml.so.1";

#[derive(Debug, Clone)]
pub struct NvmlConfig {
    /// The NVML library; `None` = the dynamic linker's `libnvidia-ml.so.1`.
    pub lib_path: Option<PathBuf>,
    /// Give NVML up for the job once the worker has been stuck this long.
    pub give_up_after: Duration,
    /// SM activity from DCGM for GPUs without GPM (`None`: not asked; `super::dcgm`).
    pub dcgm: Option<DcgmConfig>,
    /// DCGM's update interval: the drain interval, so each drain finds one new value.
    pub dcgm_interval: Duration,
}

impl Default for NvmlConfig {
    fn default() -> Self {
        NvmlConfig {
            lib_path: None,
            give_up_after: Duration::from_secs(120),
            dcgm: None,
            dcgm_interval: super::monitor::DEFAULT_DRAIN_INTERVAL,
        }
    }
}

enum Request {
    Sample { seq: u64, pids: Vec<u32> },
    Drain { seq: u64 },
}

enum Response {
    Opened(Result<OpenResult, (String, bool)>),
    Sampled {
        seq: u64,
        devices: Vec<Option<DeviceSample>>,
        events: Vec<GpuEvent>,
    },
    Drained {
        seq: u64,
        devices: Vec<Option<DeviceDrain>>,
        events: Vec<GpuEvent>,
    },
}

impl Response {
    fn seq(&self) -> Option<u64> {
        match self {
            Response::Opened(_) => None,
            Response::Sampled { seq, .. } | Response::Drained { seq, .. } => Some(*seq),
        }
    }
}

struct Link {
    tx: Sender<Request>,
    rx: Receiver<Response>,
    next_seq: u64,
    /// A request that overran its deadline and has not been answered: (seq, sent at).
    stuck: Option<(u64, Instant)>,
}

/// The NVML backend (see the module doc).
pub struct NvmlBackend {
    cfg: NvmlConfig,
    link: Option<Link>,
    n_devices: usize,
    gave_up: bool,
    /// Set by the monitor when the job ends: waits on the worker end there too.
    cutoff: Cutoff,
}

impl NvmlBackend {
    pub fn new(cfg: NvmlConfig) -> Self {
        NvmlBackend {
            cfg,
            link: None,
            n_devices: 0,
            gave_up: false,
            cutoff: Cutoff::default(),
        }
    }

    /// True once NVML was given up for the job (hung worker, dead worker).
    pub fn gave_up(&self) -> bool {
        self.gave_up
    }

    fn missing(&self, events: Vec<GpuEvent>) -> BackendSample {
        BackendSample {
            devices: vec![None; self.n_devices],
            events,
        }
    }

    fn give_up(&mut self, why: String) -> GpuEvent {
        // Dropping the link closes the channels: a worker that comes back finds them closed and
        // exits (shutting NVML down); one that never comes back stays the only stuck thread.
        self.link = None;
        self.gave_up = true;
        GpuEvent {
            kind: EventKind::NvmlGaveUp,
            slot: None,
            message: why,
        }
    }
}

fn classify_init_error(e: &NvmlError) -> (String, bool) {
    let quiet = matches!(
        e,
        NvmlError::LibloadingError(_) | NvmlError::DriverNotLoaded | NvmlError::LibraryNotFound
    );
    (format!("NVML not available: {e}"), quiet)
}

impl GpuBackend for NvmlBackend {
    fn name(&self) -> &'static str {
        "nvml"
    }

    fn open(&mut self, wanted: &[Wanted], deadline: Instant) -> OpenResult {
        if let Some(p) = &self.cfg.lib_path {
            if !p.exists() {
                return OpenResult {
                    unavailable: Some(format!("NVML not available: {} not found", p.display())),
                    quiet: true,
                    ..Default::default()
                };
            }
        }
        let (req_tx, req_rx) = channel::<Request>();
        let (resp_tx, resp_rx) = channel::<Response>();
        let lib = self.cfg.lib_path.clone();
        let dcgm = self.cfg.dcgm.clone().map(|c| (c, self.cfg.dcgm_interval));
        let wanted_owned = wanted.to_vec();
        let spawned = std::thread::Builder::new()
            .name("jobscope-nvml".into())
            .stack_size(2 * 1024 * 1024)
            .spawn(move || {
                // A panic ends the worker; the backend sees the channel close.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    worker(lib, dcgm, wanted_owned, req_rx, resp_tx)
                }));
            });
        if let Err(e) = spawned {
            return OpenResult {
                unavailable: Some(format!("cannot start the NVML thread: {e}")),
                ..Default::default()
            };
        }
        let started = Instant::now();
        let answer = loop {
            match resp_rx.recv_timeout(self.cutoff.slice(deadline)) {
                Err(RecvTimeoutError::Timeout) if !self.cutoff.passed(deadline) => continue,
                r => break r,
            }
        };
        match answer {
            Ok(Response::Opened(Ok(o))) => {
                self.n_devices = o.devices.len();
                self.link = Some(Link {
                    tx: req_tx,
                    rx: resp_rx,
                    next_seq: 0,
                    stuck: None,
                });
                o
            }
            Ok(Response::Opened(Err((msg, quiet)))) => OpenResult {
                unavailable: Some(msg),
                quiet,
                ..Default::default()
            },
            Ok(Response::Sampled { .. } | Response::Drained { .. })
            | Err(RecvTimeoutError::Disconnected) => {
                self.gave_up = true;
                OpenResult {
                    unavailable: Some("NVML worker died during init".into()),
                    ..Default::default()
                }
            }
            Err(RecvTimeoutError::Timeout) => {
                let ev = self.give_up(format!(
                    "NVML init and device discovery did not finish within {:.1} s{}; GPUs not sampled",
                    started.elapsed().as_secs_f64(),
                    if Instant::now() < deadline {
                        " (the job ended)"
                    } else {
                        ""
                    }
                ));
                OpenResult {
                    unavailable: Some(ev.message.clone()),
                    events: vec![ev],
                    ..Default::default()
                }
            }
        }
    }

    fn set_cutoff(&mut self, cutoff: Cutoff) {
        self.cutoff = cutoff;
    }

    fn sample(&mut self, job_pids: &[u32], deadline: Instant) -> BackendSample {
        let pids = job_pids.to_vec();
        match self.roundtrip(|seq| Request::Sample { seq, pids }, deadline, "sample") {
            Ok(Response::Sampled {
                devices, events, ..
            }) => BackendSample { devices, events },
            Ok(_) => self.missing(vec![]),
            Err(events) => self.missing(events),
        }
    }

    fn drain(&mut self, deadline: Instant) -> Option<BackendDrain> {
        // Given up (or never opened): nothing to drain, and no reason to wake up for it.
        self.link.as_ref()?;
        Some(
            match self.roundtrip(|seq| Request::Drain { seq }, deadline, "drain") {
                Ok(Response::Drained {
                    devices, events, ..
                }) => BackendDrain { devices, events },
                Ok(_) => BackendDrain {
                    devices: vec![None; self.n_devices],
                    events: vec![],
                },
                Err(events) => BackendDrain {
                    devices: vec![None; self.n_devices],
                    events,
                },
            },
        )
    }
}

impl NvmlBackend {
    /// Sends one request to the worker and waits for its answer until `deadline` (or the
    /// cutoff). `Err`: no answer (the events say why, if anything is worth saying).
    fn roundtrip(
        &mut self,
        make: impl FnOnce(u64) -> Request,
        deadline: Instant,
        what: &str,
    ) -> Result<Response, Vec<GpuEvent>> {
        let give_up_after = self.cfg.give_up_after;
        let cutoff = self.cutoff.clone();
        let Some(link) = self.link.as_mut() else {
            return Err(vec![]);
        };
        // Late answers: the worker is free again; their values are stale and dropped.
        loop {
            match link.rx.try_recv() {
                Ok(r) => {
                    if let (Some(seq), Some((s, _))) = (r.seq(), link.stuck) {
                        if s == seq {
                            link.stuck = None;
                        }
                    }
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    return Err(vec![self.give_up("the NVML worker thread died".into())]);
                }
            }
        }
        if let Some((_, since)) = link.stuck {
            if since.elapsed() >= give_up_after {
                let secs = since.elapsed().as_secs();
                return Err(vec![self.give_up(format!(
                    "an NVML call has not returned for {secs} s; GPU sampling stopped for this job"
                ))]);
            }
            return Err(vec![]);
        }
        let seq = link.next_seq;
        link.next_seq += 1;
        let sent = Instant::now();
        if link.tx.send(make(seq)).is_err() {
            return Err(vec![self.give_up("the NVML worker thread died".into())]);
        }
        loop {
            // In slices: the job's end (the cutoff) may come while the driver is slow.
            match link.rx.recv_timeout(cutoff.slice(deadline)) {
                Ok(r) if r.seq() == Some(seq) => return Ok(r),
                Ok(_) => continue,
                Err(RecvTimeoutError::Timeout) if !cutoff.passed(deadline) => continue,
                Err(RecvTimeoutError::Timeout) => {
                    link.stuck = Some((seq, sent));
                    return Err(vec![GpuEvent {
                        kind: EventKind::NvmlTimeout,
                        slot: None,
                        message: format!(
                            "NVML did not answer within {:.1} s; {what} skipped",
                            // The monitor set the deadline just before `sent`: 1.999 s reads 2.0 s.
                            cutoff
                                .bound(deadline)
                                .saturating_duration_since(sent)
                                .as_secs_f64()
                        ),
                    }]);
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(vec![self.give_up("the NVML worker thread died".into())]);
                }
            }
        }
    }
}

/// The worker: owns NVML and the device handles for the life of the job.
fn worker(
    lib: Option<PathBuf>,
    dcgm: Option<(DcgmConfig, Duration)>,
    wanted: Vec<Wanted>,
    rx: Receiver<Request>,
    tx: Sender<Response>,
) {
    let mut builder = Nvml::builder();
    if let Some(p) = &lib {
        builder.lib_path(p.as_os_str());
    }
    let nvml = match builder.init() {
        Ok(n) => ManuallyDrop::new(n),
        Err(e) => {
            let _ = tx.send(Response::Opened(Err(classify_init_error(&e))));
            return;
        }
    };
    {
        let (devices, mut opened) = discover(&nvml, &wanted);
        let n = devices.len();
        let mut st = WorkerState {
            lost: vec![false; n],
            reported: HashSet::new(),
            buffers: vec![BufferState::default(); n],
            health: Vec::with_capacity(n),
            dcgm: None,
        };
        let mut lacks = Vec::new();
        // Per GPU without GPM: (slot, its label, its UUID, why no GPM).
        let mut without_gpm = Vec::new();
        for (slot, d) in devices.iter().enumerate() {
            let (label, uuid) = opened
                .devices
                .get(slot)
                .map(|(_, id)| (id.identity.label(), id.identity.uuid.clone()))
                .unwrap_or_default();
            let (h, no_gpm) = open_health(&nvml, d, &label, &mut lacks);
            if let Some(why) = no_gpm {
                without_gpm.push((slot, label, uuid, why));
            }
            st.health.push(h);
        }
        st.dcgm = open_dcgm(dcgm, without_gpm, &mut lacks);
        opened.notes.extend(merge_lacks(lacks));
        // What the buffers hold now predates the job: read only to start after it (its values
        // are dropped; what went wrong, a lost GPU, is reported with the opening).
        for (slot, d) in devices.iter().enumerate() {
            drain_device(d, slot, true, &mut st, &mut opened.events);
        }
        if tx.send(Response::Opened(Ok(opened))).is_ok() {
            while let Ok(req) = rx.recv() {
                let mut events = Vec::new();
                let resp = match req {
                    Request::Sample { seq, pids } => {
                        let mut devices: Vec<Option<DeviceSample>> = devices
                            .iter()
                            .enumerate()
                            .map(|(slot, d)| {
                                sample_device(&nvml, d, slot, &pids, &mut st, &mut events)
                            })
                            .collect();
                        dcgm_interval_end(&mut st.dcgm, &mut devices, &mut events);
                        Response::Sampled {
                            seq,
                            devices,
                            events,
                        }
                    }
                    Request::Drain { seq } => {
                        dcgm_accumulate(&mut st.dcgm, &mut events);
                        Response::Drained {
                            seq,
                            devices: devices
                                .iter()
                                .enumerate()
                                .map(|(slot, d)| drain_device(d, slot, false, &mut st, &mut events))
                                .collect(),
                            events,
                        }
                    }
                };
                if tx.send(resp).is_err() {
                    break;
                }
            }
        }
        // The GPM buffers and event sets are freed here, before NVML shuts down (their `Drop`
        // calls NVML).
        drop(st);
    }
    // `shutdown()` returns the error instead of `Drop`'s `expect()`.
    let _ = ManuallyDrop::into_inner(nvml).shutdown();
}

/// Enumerates NVML's devices (and MIG instances) and picks the wanted ones, in slot order.
fn discover<'n>(nvml: &'n Nvml, wanted: &[Wanted]) -> (Vec<Device<'n>>, OpenResult) {
    let mut inv: Vec<InventoryDevice> = Vec::new();
    let mut handles: Vec<Option<Device<'n>>> = Vec::new();
    let count = nvml.device_count().unwrap_or(0);
    for i in 0..count {
        // Inside the job's devices cgroup the other GPUs answer NO_PERMISSION: skip them.
        let Ok(d) = nvml.device_by_index(i) else {
            continue;
        };
        let id = GpuIdentity {
            kind: Some(GpuKind::Nvidia),
            index: Some(i),
            gres_index: None,
            minor: d.minor_number().ok(),
            uuid: d.uuid().ok(),
            pci_bus_id: d.pci_info().ok().map(|p| p.bus_id),
            name: d.name().ok(),
            parent_uuid: None,
        };
        let mem_total_bytes = d.memory_info().ok().map(|m| m.total);
        let mut migs = Vec::new();
        if matches!(d.mig_mode(), Ok(m) if m.current == 1) {
            for j in 0..d.mig_device_count().unwrap_or(0) {
                let Ok(m) = d.mig_device_by_index(j) else {
                    continue; // empty slot
                };
                let mid = GpuDevice {
                    identity: GpuIdentity {
                        kind: Some(GpuKind::Mig),
                        index: Some(i),
                        gres_index: None,
                        minor: None,
                        uuid: m.uuid().ok(),
                        pci_bus_id: id.pci_bus_id.clone(),
                        name: m.name().ok(),
                        parent_uuid: id.uuid.clone(),
                    },
                    mem_total_bytes: m.memory_info().ok().map(|x| x.total),
                };
                migs.push((mid, m));
            }
        }
        let parent = inv.len();
        inv.push(InventoryDevice {
            device: GpuDevice {
                identity: id,
                mem_total_bytes,
            },
            drm_minors: vec![],
            parent: None,
        });
        handles.push(Some(d));
        for (mid, m) in migs {
            inv.push(InventoryDevice {
                device: mid,
                drm_minors: vec![],
                parent: Some(parent),
            });
            handles.push(Some(m));
        }
    }
    let r = resolve(wanted, &inv);
    let mut devices = Vec::new();
    let mut out = OpenResult::default();
    for (wi, ii) in r.matches {
        if let Some(h) = handles[ii].take() {
            let mut id = inv[ii].device.clone();
            id.identity.gres_index = wanted[wi].gres_index;
            out.devices.push((wi, id));
            devices.push(h);
        }
    }
    (devices, out)
}

struct WorkerState<'n> {
    lost: Vec<bool>,
    /// (slot, call) pairs whose unexpected error was already reported.
    reported: HashSet<(usize, &'static str)>,
    buffers: Vec<BufferState>,
    /// Per device: its GPM buffers and XID event set (empty for a device opened without them).
    health: Vec<Health<'n>>,
    /// DCGM's SM figures for the GPUs without GPM, where the host engine gives them.
    dcgm: Option<DcgmState>,
}

/// The DCGM connection and, per GPU watched, the sums of the values read in the interval so far.
struct DcgmState {
    conn: Dcgm,
    /// Per slot: (sum of per mille values, how many) for each of the four figures.
    acc: std::collections::HashMap<usize, [(u64, u64); 4]>,
}

/// Connects to DCGM for the GPUs without GPM, if the site asked for it. What it covers gets a
/// note naming the source; what it does not keeps the GPM note, with DCGM's reason added.
fn open_dcgm(
    cfg: Option<(DcgmConfig, Duration)>,
    without_gpm: Vec<(usize, String, Option<String>, String)>,
    lacks: &mut Vec<(String, String)>,
) -> Option<DcgmState> {
    let kernel_time = "the GPU figures are kernel time (utilization.gpu), which counts one busy \
                       SM as a busy GPU";
    let opened = match (&cfg, without_gpm.is_empty()) {
        (_, true) => return None,
        (None, _) => Err("DCGM is not read ([gpu] dcgm = false)".to_string()),
        (Some((c, interval)), _) => {
            let wanted: Vec<(usize, String)> = without_gpm
                .iter()
                .filter_map(|(slot, _, uuid, _)| Some((*slot, uuid.clone()?)))
                .collect();
            Dcgm::open(c, &wanted, *interval).map_err(|e| e.why)
        }
    };
    let covered: Vec<usize> = opened
        .as_ref()
        .map(|d| d.slots().collect())
        .unwrap_or_default();
    for (slot, label, _, why) in &without_gpm {
        if covered.contains(slot) {
            lacks.push((
                format!(
                    "SM activity from DCGM's profiling fields (nv-hostengine at {}): NVML GPM {why}",
                    cfg.as_ref().map(|(c, _)| c.address.as_str()).unwrap_or("")
                ),
                label.clone(),
            ));
        } else {
            let dcgm_why = match &opened {
                Err(e) => e.clone(),
                Ok(_) => "the host engine does not list this GPU".to_string(),
            };
            lacks.push((
                format!(
                    "SM activity (NVML GPM) {why}, and none from DCGM ({dcgm_why}): {kernel_time}"
                ),
                label.clone(),
            ));
        }
    }
    opened.ok().map(|conn| DcgmState {
        conn,
        acc: Default::default(),
    })
}

/// Reads DCGM's newest values into the interval's sums. A failed read gives DCGM up for the job
/// (one event): the host engine went away, or stopped profiling.
fn dcgm_accumulate(st: &mut Option<DcgmState>, events: &mut Vec<GpuEvent>) {
    let Some(d) = st.as_mut() else {
        return;
    };
    match d.conn.read() {
        Ok(read) => {
            for (slot, figures) in read {
                let acc = d.acc.entry(slot).or_insert([(0, 0); 4]);
                for (a, f) in acc.iter_mut().zip(figures) {
                    if let Some(v) = f {
                        a.0 += u64::from(v);
                        a.1 += 1;
                    }
                }
            }
        }
        Err(e) => {
            *st = None;
            events.push(GpuEvent {
                kind: EventKind::NvmlError,
                slot: None,
                message: format!("DCGM: {e}; SM activity is not read from now on"),
            });
        }
    }
}

/// The interval's DCGM figures (the mean of the values read in it, the last read now) into the
/// samples of the GPUs DCGM watches; the sums start again.
fn dcgm_interval_end(
    st: &mut Option<DcgmState>,
    devices: &mut [Option<DeviceSample>],
    events: &mut Vec<GpuEvent>,
) {
    dcgm_accumulate(st, events);
    let Some(d) = st.as_mut() else {
        return;
    };
    for (slot, acc) in d.acc.drain() {
        let Some(Some(s)) = devices.get_mut(slot) else {
            continue;
        };
        let mean = |(sum, n): (u64, u64)| (n > 0).then(|| ((sum + n / 2) / n) as u32);
        s.sm_active_permille = mean(acc[0]);
        s.sm_occupancy_permille = mean(acc[1]);
        s.tensor_active_permille = mean(acc[2]);
        s.dram_active_permille = mean(acc[3]);
    }
}

/// A device's GPM buffers and XID watch, set up once at open.
#[derive(Default)]
struct Health<'n> {
    /// Two GPM samples, allocated once: `prev` holds the interval's start, `cur` is filled at
    /// each sample, then they swap. `None`: no GPM on this device (or given up).
    gpm: Option<Gpm<'n>>,
    /// The device's own XID event set (one per device: a failed registration frees the set).
    xid_set: Option<EventSet<'n>>,
    /// XID errors polled since the last sample.
    xids: XidReport,
}

struct Gpm<'n> {
    prev: GpmSample<'n>,
    cur: GpmSample<'n>,
    /// `prev` holds a sample (false after a failed fill: the next sample starts a new interval).
    primed: bool,
}

/// A GPM buffer, allocated through NVML (nvml-wrapper's `gpm_sample` allocates one per call;
/// this one is kept and refilled). Freed by its `Drop`.
fn gpm_alloc(nvml: &Nvml) -> Result<GpmSample<'_>, NvmlError> {
    let lib = nvml.lib();
    // Every GPM symbol first: `GpmSample`'s `Drop` calls `nvmlGpmSampleFree` unchecked.
    if lib.nvmlGpmSampleFree.is_err()
        || lib.nvmlGpmSampleGet.is_err()
        || lib.nvmlGpmMetricsGet.is_err()
    {
        return Err(NvmlError::NotSupported);
    }
    let alloc = lib
        .nvmlGpmSampleAlloc
        .as_ref()
        .map_err(|_| NvmlError::NotSupported)?;
    let mut h = std::ptr::null_mut();
    // SAFETY: an out-pointer for the handle; the symbol is NVML's.
    nvml_try(unsafe { alloc(&mut h) })?;
    // SAFETY: `h` was just allocated by this library and is owned by nothing else.
    Ok(unsafe { GpmSample::from_handle(nvml, h) })
}

/// Fills `s` with the device's counters now (`nvmlGpmSampleGet`).
fn gpm_fill(nvml: &Nvml, d: &Device<'_>, s: &GpmSample<'_>) -> Result<(), NvmlError> {
    let get = nvml
        .lib()
        .nvmlGpmSampleGet
        .as_ref()
        .map_err(|_| NvmlError::NotSupported)?;
    // SAFETY: both handles are live (the device's and the buffer's, from this library).
    nvml_try(unsafe { get(d.handle(), s.handle()) })
}

/// One note per thing the GPUs lack, naming every GPU that lacks it (`(what, GPU label)` pairs in
/// the devices' order): a node of eight GPUs before Hopper gets one line about SM activity, not
/// eight.
fn merge_lacks(lacks: Vec<(String, String)>) -> Vec<String> {
    let mut whats: Vec<(String, Vec<String>)> = Vec::new();
    for (what, label) in lacks {
        match whats.iter_mut().find(|(w, _)| *w == what) {
            Some((_, labels)) => labels.push(label),
            None => whats.push((what, vec![label])),
        }
    }
    whats
        .into_iter()
        .map(|(what, labels)| format!("{}: {what}", labels.join(", ")))
        .collect()
}

/// Sets up a device's GPM buffers and XID watch; what it lacks goes to `lacks` as (what, the
/// GPU's label), merged across GPUs by [`merge_lacks`] (once per job), except GPM: why a GPU
/// (not a MIG instance) has none is returned, for DCGM to stand in ([`open_dcgm`]).
fn open_health<'n>(
    nvml: &'n Nvml,
    d: &Device<'n>,
    label: &str,
    lacks: &mut Vec<(String, String)>,
) -> (Health<'n>, Option<String>) {
    let mut h = Health::default();
    let mig = d.mig_is_mig_device_handle().unwrap_or(false);
    let gpm = if mig {
        Err("not read for MIG instances".to_string())
    } else {
        match d.gpm_support() {
            Ok(true) => gpm_alloc(nvml)
                .and_then(|prev| Ok((prev, gpm_alloc(nvml)?)))
                .map_err(|e| format!("its buffers could not be allocated ({e})")),
            Ok(false) => Err("not supported by this GPU (Hopper and later)".to_string()),
            Err(e) if unsupported(&e) => {
                Err("not supported by this driver or GPU (Hopper and later)".to_string())
            }
            Err(e) => Err(format!("not available ({e})")),
        }
    };
    let mut no_gpm = None;
    match gpm {
        Ok((prev, cur)) => {
            // The first interval starts now.
            let primed = gpm_fill(nvml, d, &prev).is_ok();
            h.gpm = Some(Gpm { prev, cur, primed });
        }
        // DCGM does not profile MIG instances either.
        Err(why) if mig => lacks.push((
            format!(
                "SM activity (NVML GPM) {why}: the GPU figures are kernel time \
                 (utilization.gpu), which counts one busy SM as a busy GPU"
            ),
            label.to_string(),
        )),
        Err(why) => no_gpm = Some(why),
    }
    // `EventSet`'s `Drop` calls `nvmlEventSetFree` unchecked: a library without it (or without
    // the wait) gets no set.
    let lib = nvml.lib();
    let set = if lib.nvmlEventSetFree.is_err() || lib.nvmlEventSetWait_v2.is_err() {
        Err("the library lacks nvmlEventSetFree or nvmlEventSetWait_v2".to_string())
    } else {
        nvml.create_event_set().map_err(|e| e.to_string())
    };
    let set = set.and_then(|set| {
        d.register_events(EventTypes::CRITICAL_XID_ERROR, set)
            .map_err(|e| e.error.to_string())
    });
    match set {
        Ok(s) => h.xid_set = Some(s),
        Err(e) => lacks.push((
            format!("XID errors are not watched (NVML events: {e})"),
            label.to_string(),
        )),
    }
    (h, no_gpm)
}

/// Reads the XID events waiting on the device's set, never waiting (timeout 0).
fn poll_xids(h: &mut Health<'_>) {
    let Some(set) = &h.xid_set else {
        return;
    };
    for _ in 0..XID_POLL_MAX {
        // TIMEOUT: nothing waiting. Any other error: stop for this drain.
        let Ok(ev) = set.wait(0) else {
            break;
        };
        let Some(x) = ev.event_data else {
            continue;
        };
        let code = match x {
            XidError::Value(v) => u32::try_from(v).unwrap_or(u32::MAX),
            XidError::Unknown => 999,
        };
        h.xids.count += 1;
        if h.xids.first.len() < XID_KEEP {
            h.xids.first.push((jobscope_common::now_unix_ms(), code));
        }
    }
}

/// A GPM metric as per mille (`None`: this metric failed or is out of range).
fn permille(
    r: Option<&Result<nvml_wrapper::struct_wrappers::gpm::GpmMetricResult, NvmlError>>,
) -> Option<u32> {
    let v = r?.as_ref().ok()?.value;
    (v.is_finite() && v >= 0.0).then(|| (v * 10.0).round().min(1000.0) as u32)
}

/// Per device: what its buffers support and the newest timestamp each answered (the next drain
/// asks for samples after it).
#[derive(Debug, Clone, Copy)]
struct BufferState {
    util_supported: bool,
    procs_supported: bool,
    last_gpu_us: u64,
    last_mem_us: u64,
    last_proc_us: u64,
}

impl Default for BufferState {
    fn default() -> Self {
        BufferState {
            util_supported: true,
            procs_supported: true,
            last_gpu_us: 0,
            last_mem_us: 0,
            last_proc_us: 0,
        }
    }
}

/// A utilization sample's value as a percent (NVML answers utilization as an unsigned int; the
/// other union members are handled in case a driver answers with them).
fn sample_pct(v: &SampleValue) -> u32 {
    match *v {
        SampleValue::U32(x) => x,
        SampleValue::U64(x) => x.min(u64::from(u32::MAX)) as u32,
        SampleValue::I64(x) => x.clamp(0, i64::from(u32::MAX)) as u32,
        SampleValue::F64(x) if x.is_finite() => x.clamp(0.0, f64::from(u32::MAX)).round() as u32,
        SampleValue::F64(_) => 0,
    }
}

/// Whether an error means "this device does not have it" (a library without the symbol too).
fn unsupported(e: &NvmlError) -> bool {
    matches!(
        e,
        NvmlError::NotSupported | NvmlError::FailedToLoadSymbol(_)
    )
}

/// One drain of one device (see the module doc). `None`: the device is lost. `skip`: the drain
/// at open, only to learn the buffers' newest timestamps (no point read: nothing is kept).
fn drain_device(
    d: &Device<'_>,
    slot: usize,
    skip: bool,
    st: &mut WorkerState,
    events: &mut Vec<GpuEvent>,
) -> Option<DeviceDrain> {
    if st.lost[slot] {
        return None;
    }
    if let Some(h) = st.health.get_mut(slot) {
        poll_xids(h);
    }
    let mut lost = false;
    let mut out = DeviceDrain::default();
    let mut b = st.buffers[slot];
    // One sampling type since its last timestamp; `Err(())`: not supported.
    let read = |kind: Sampling,
                call: &'static str,
                last: &mut u64,
                st: &mut WorkerState,
                events: &mut Vec<GpuEvent>,
                lost: &mut bool|
     -> Result<Vec<(u64, u32)>, ()> {
        match d.samples(kind, *last) {
            Ok(v) => {
                let v: Vec<(u64, u32)> = v
                    .iter()
                    .filter(|s| s.timestamp > *last)
                    .map(|s| (s.timestamp, sample_pct(&s.value)))
                    .collect();
                if let Some(newest) = v.iter().map(|x| x.0).max() {
                    *last = newest;
                }
                Ok(v)
            }
            Err(NvmlError::NotFound) => Ok(vec![]),
            Err(e) if unsupported(&e) => Err(()),
            Err(e) => {
                value::<()>(Err(e), call, slot, st, events, lost);
                Ok(vec![])
            }
        }
    };
    if b.util_supported {
        match read(
            Sampling::GpuUtilization,
            "nvmlDeviceGetSamples",
            &mut b.last_gpu_us,
            st,
            events,
            &mut lost,
        ) {
            Ok(v) => {
                out.util_gpu = v;
                out.util_mem = read(
                    Sampling::MemoryUtilization,
                    "nvmlDeviceGetSamples",
                    &mut b.last_mem_us,
                    st,
                    events,
                    &mut lost,
                )
                .unwrap_or_default();
            }
            Err(()) => b.util_supported = false,
        }
    }
    if !b.util_supported && !lost && !skip {
        out.source = UtilSource::Point;
        if let Some(u) = value(
            d.utilization_rates(),
            "nvmlDeviceGetUtilizationRates",
            slot,
            st,
            events,
            &mut lost,
        ) {
            out.util_gpu = vec![(0, u.gpu)];
            out.util_mem = vec![(0, u.memory)];
        }
    }
    if b.procs_supported && !lost {
        match d.process_utilization_stats(b.last_proc_us) {
            Ok(v) => {
                let v: Vec<ProcessUtil> = v
                    .iter()
                    .filter(|p| p.timestamp > b.last_proc_us)
                    .map(|p| ProcessUtil {
                        pid: p.pid,
                        timestamp_us: p.timestamp,
                        sm_pct: p.sm_util,
                        mem_pct: p.mem_util,
                    })
                    .collect();
                if let Some(newest) = v.iter().map(|p| p.timestamp_us).max() {
                    b.last_proc_us = newest;
                }
                out.processes = Some(v);
            }
            Err(NvmlError::NotFound) => out.processes = Some(vec![]),
            Err(e) if unsupported(&e) => b.procs_supported = false,
            // More samples arrived between the count and the fill: none this time (the next
            // drain asks again from the same timestamp).
            Err(NvmlError::InsufficientSize(_)) => {}
            Err(e) => {
                value::<()>(
                    Err(e),
                    "nvmlDeviceGetProcessUtilization",
                    slot,
                    st,
                    events,
                    &mut lost,
                );
            }
        }
    }
    st.buffers[slot] = b;
    if lost {
        mark_lost(st, slot, events);
        return None;
    }
    Some(out)
}

/// Records that the device in `slot` fell off the bus: it is not read again, and the report
/// says so (one `GpuLost` event).
fn mark_lost(st: &mut WorkerState, slot: usize, events: &mut Vec<GpuEvent>) {
    st.lost[slot] = true;
    events.push(GpuEvent {
        kind: EventKind::GpuLost,
        slot: Some(slot),
        message: "NVML: GPU is lost (fell off the bus or is otherwise inaccessible)".into(),
    });
}

/// `Ok` → `Some`; `NOT_SUPPORTED` → `None`; `GPU_IS_LOST` → `None` and `lost`; anything else →
/// `None` and one event per device and call.
fn value<T>(
    r: Result<T, NvmlError>,
    call: &'static str,
    slot: usize,
    st: &mut WorkerState<'_>,
    events: &mut Vec<GpuEvent>,
    lost: &mut bool,
) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(NvmlError::NotSupported) => None,
        Err(NvmlError::GpuLost) => {
            *lost = true;
            None
        }
        Err(e) => {
            if st.reported.insert((slot, call)) {
                events.push(GpuEvent {
                    kind: EventKind::NvmlError,
                    slot: Some(slot),
                    message: format!("{call}: {e}"),
                });
            }
            None
        }
    }
}

fn sample_device<'n>(
    nvml: &'n Nvml,
    d: &Device<'n>,
    slot: usize,
    pids: &[u32],
    st: &mut WorkerState<'n>,
    events: &mut Vec<GpuEvent>,
) -> Option<DeviceSample> {
    if st.lost[slot] {
        return None;
    }
    // The buffers first: the bucket this sample closes covers the interval up to now. A device
    // lost meanwhile is `None` (the drain recorded the event).
    let drain = drain_device(d, slot, false, st, events)?;
    let mut lost = false;
    let mut s = DeviceSample::default();
    macro_rules! call {
        ($name:literal, $e:expr) => {
            if lost {
                None
            } else {
                value($e, $name, slot, st, events, &mut lost)
            }
        };
    }
    // The instantaneous figures: the drain's point read, else the buffer's newest sample (no
    // second call for what the drain already read).
    s.util_gpu_pct = drain.util_gpu.last().map(|x| x.1);
    s.util_mem_pct = drain.util_mem.last().map(|x| x.1);
    s.drain = Some(drain);
    if let Some(m) = call!("nvmlDeviceGetMemoryInfo_v2", d.memory_info()) {
        s.mem_used_bytes = Some(m.used);
        s.mem_total_bytes = Some(m.total);
    }
    s.power_mw = call!("nvmlDeviceGetPowerUsage", d.power_usage()).map(u64::from);
    s.energy_mj = call!(
        "nvmlDeviceGetTotalEnergyConsumption",
        d.total_energy_consumption()
    );
    s.throttle_reasons = call!(
        "nvmlDeviceGetCurrentClocksThrottleReasons",
        d.current_throttle_reasons()
    )
    .map(|r| r.bits());
    if let Some(procs) = call!(
        "nvmlDeviceGetComputeRunningProcesses_v3",
        d.running_compute_processes()
    ) {
        let (mut mine, mut others, mut mem) = (0u32, 0u32, Some(0u64));
        for p in &procs {
            if pids.binary_search(&p.pid).is_ok() {
                mine += 1;
                mem = match (mem, &p.used_gpu_memory) {
                    (Some(m), UsedGpuMemory::Used(b)) => Some(m.saturating_add(*b)),
                    _ => None,
                };
            } else {
                others += 1;
            }
        }
        s.job_processes = Some(mine);
        s.job_mem_bytes = mem;
        s.other_processes = Some(others);
    }
    s.sm_clock_mhz = call!("nvmlDeviceGetClockInfo", d.clock_info(Clock::SM));
    s.mem_clock_mhz = call!("nvmlDeviceGetClockInfo", d.clock_info(Clock::Memory));
    s.violation_power_ns = call!(
        "nvmlDeviceGetViolationStatus",
        d.violation_status(PerformancePolicy::Power)
    )
    .map(|v| v.violation_time);
    s.violation_thermal_ns = call!(
        "nvmlDeviceGetViolationStatus",
        d.violation_status(PerformancePolicy::Thermal)
    )
    .map(|v| v.violation_time);
    s.ecc_corrected_total = call!(
        "nvmlDeviceGetTotalEccErrors",
        d.total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile)
    );
    s.ecc_uncorrected_total = call!(
        "nvmlDeviceGetTotalEccErrors",
        d.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)
    );
    if !lost {
        gpm_interval(nvml, d, slot, &mut s, st, events, &mut lost);
    }
    if let Some(h) = st.health.get_mut(slot) {
        if h.xid_set.is_some() {
            s.xids = Some(std::mem::take(&mut h.xids));
        }
    }
    if lost {
        mark_lost(st, slot, events);
        return None;
    }
    Some(s)
}

/// The GPM figures of the interval since the last sample into `s`: `cur` filled now, the
/// metrics between `prev` and it, then the two swap (no allocation). A device whose GPM answers
/// NOT_SUPPORTED is given up (its buffers freed).
fn gpm_interval<'n>(
    nvml: &'n Nvml,
    d: &Device<'n>,
    slot: usize,
    s: &mut DeviceSample,
    st: &mut WorkerState<'n>,
    events: &mut Vec<GpuEvent>,
    lost: &mut bool,
) {
    let Some(mut g) = st.health.get_mut(slot).and_then(|h| h.gpm.take()) else {
        return;
    };
    let filled = gpm_fill(nvml, d, &g.cur);
    let filled_ok = filled.is_ok();
    let r = match filled {
        Ok(()) if g.primed => {
            nvml_wrapper::gpm::gpm_metrics_get(nvml, &g.prev, &g.cur, &GPM_METRICS).map(Some)
        }
        Ok(()) => Ok(None),
        Err(e) => Err(e),
    };
    let keep = match r {
        Ok(Some(m)) => {
            s.sm_active_permille = permille(m.first());
            s.sm_occupancy_permille = permille(m.get(1));
            s.tensor_active_permille = permille(m.get(2));
            s.dram_active_permille = permille(m.get(3));
            true
        }
        Ok(None) => true,
        Err(e) if unsupported(&e) => false,
        Err(e) => {
            value::<()>(Err(e), "nvmlGpmMetricsGet", slot, st, events, lost);
            true
        }
    };
    if keep {
        // `cur` starts the next interval when it was filled; else the next fill restarts.
        g.primed = filled_ok;
        std::mem::swap(&mut g.prev, &mut g.cur);
        st.health[slot].gpm = Some(g);
    }
}

#[cfg(test)]
mod merge_tests {
    use super::merge_lacks;

    /// Two GPUs lacking the same thing make one note naming both; a different lack its own.
    #[test]
    fn lacks_are_said_once_naming_every_gpu() {
        let n = merge_lacks(vec![
            ("no GPM".into(), "GPU 0".into()),
            ("no XID".into(), "GPU 0".into()),
            ("no GPM".into(), "GPU 1".into()),
        ]);
        assert_eq!(
            n,
            vec![
                "GPU 0, GPU 1: no GPM".to_string(),
                "GPU 0: no XID".to_string()
            ]
        );
        assert!(merge_lacks(vec![]).is_empty());
    }
}
