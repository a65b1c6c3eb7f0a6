//! The job's GPU sampling thread.
//!
//! It is separate from the cgroup sampler ([`crate::sampler`]) on purpose: a driver that hangs can
//! delay only GPU samples, never CPU/memory ones. Everything is bounded: one monitor thread, at
//! most one NVML worker (see [`super::nvml`]), a deadline per sample, a capped `gpu.jsc`
//! ([`super::spool`]), and a stop that waits a bounded time. Nothing it does can fail the job:
//! problems are logged (once) and recorded as events.
//!
//! ```text
//! start ─ create gpu.jsc (header) ─ open backends (≤ open_timeout) ─ info frame
//!       ─ every drain_interval between slots: drain the driver's utilization buffers (≤ sample_timeout)
//!       ─ every schedule slot: pids = pid_source(); drain + sample (≤ sample_timeout) ─ bucket frame
//! stop  ─ one last sample (≤ what is left of the stop's wait) ─ end frame
//! ```
//!
//! The drains are what makes a bucket's utilization cover its interval: NVML's buffer holds 14 s
//! of 200 ms samples on an H100, so read once per 30 s slot it would cover the last 14 s only.
//! Each device's drains are folded ([`IntervalFold`]) into the bucket of the next slot; a
//! backend without a buffer (`GpuBackend::drain` answers `None`) is never woken for it.

use super::amd::AmdBackend;
use super::assign::{GpuRef, GpuSelection, Wanted};
use super::nvml::{NvmlBackend, NvmlConfig};
use super::spool::{DeviceBucket, GpuBucket, GpuInfo, GpuLimits, GpuWriter, GPU_FILE_NAME};
use super::{Cutoff, DeviceSample, GpuBackend, GpuDevice, GpuEvent, IntervalFold};
use crate::sampler::Schedule;
use crate::spool::{End, Event, EventKind, Gauge, Header};
use jobscope_common::now_unix_ms;
use jobscope_model::gpu::fold::UTIL_FROM_POINT_READS;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    /// Normal states worth a trace (no GPU driver on this node).
    Debug,
    Info,
    Error,
}

/// Where the monitor logs (the plugin maps levels to `slurm_debug`/`slurm_info`/`slurm_error`).
pub type GpuLogFn = Box<dyn Fn(LogLevel, &str) + Send>;
/// The job's pids, asked once per sample (e.g. [`cgroup_pid_source`]).
pub type PidSource = Box<dyn FnMut() -> Vec<u32> + Send>;

/// Site knobs for the GPU backends.
#[derive(Debug, Clone)]
pub struct BackendConfig {
    /// Use NVML for NVIDIA devices.
    pub nvidia: bool,
    /// NVML library; `None` = `libnvidia-ml.so.1` from the dynamic linker's path.
    pub nvml_lib_path: Option<PathBuf>,
    /// SM activity from DCGM for GPUs without GPM (`None`: DCGM is not read).
    pub dcgm: Option<super::dcgm::DcgmConfig>,
    /// Use amdgpu sysfs for AMD devices.
    pub amd: bool,
    /// Root of sysfs (`/sys`).
    pub sysfs_root: PathBuf,
    /// Longest wait for backend init and device discovery (NVML init can take seconds).
    pub open_timeout: Duration,
    /// Deadline of one sample; a device not read by then is missing for that sample.
    pub sample_timeout: Duration,
    /// Give NVML up for the job when one call has been stuck this long.
    pub give_up_after: Duration,
    /// Cap of `gpu.jsc`.
    pub max_file_bytes: u64,
    /// How often the driver's utilization buffers are drained between two samples (more often
    /// than the buffer fills: 14 s on an H100).
    pub drain_interval: Duration,
}

/// Default of [`BackendConfig::drain_interval`] (`gpu.drain_interval_s`).
pub const DEFAULT_DRAIN_INTERVAL: Duration = Duration::from_secs(5);

impl Default for BackendConfig {
    fn default() -> Self {
        BackendConfig {
            nvidia: true,
            nvml_lib_path: None,
            dcgm: Some(super::dcgm::DcgmConfig::default()),
            amd: true,
            sysfs_root: PathBuf::from("/sys"),
            open_timeout: Duration::from_secs(30),
            sample_timeout: Duration::from_secs(5),
            give_up_after: Duration::from_secs(120),
            max_file_bytes: super::spool::DEFAULT_MAX_GPU_FILE_BYTES,
            drain_interval: DEFAULT_DRAIN_INTERVAL,
        }
    }
}

impl BackendConfig {
    /// The backends as `[gpu]` of the configuration file sets them, with `gpu.jsc` capped at its
    /// share of the node's spool budget: the one place the plugin and `jobscope run` get them.
    pub fn from_settings(g: &jobscope_config::Gpu) -> Self {
        BackendConfig {
            nvidia: g.nvidia,
            nvml_lib_path: g.nvml_lib_path.clone(),
            dcgm: g.dcgm.then(|| super::dcgm::DcgmConfig {
                lib_path: g.dcgm_lib_path.clone(),
                address: g.dcgm_address.clone(),
                ..Default::default()
            }),
            amd: g.amd,
            sample_timeout: Duration::from_secs(g.sample_timeout_s),
            max_file_bytes: crate::spool::GPU_FILE_BUDGET_BYTES,
            drain_interval: Duration::from_secs(g.drain_interval_s),
            ..BackendConfig::default()
        }
    }

    /// The backends that could answer `sel` (none for an empty selection). Creating them does no
    /// I/O: NVML is loaded in [`GpuBackend::open`], in the monitor's thread.
    pub fn backends_for(&self, sel: &GpuSelection) -> Vec<Box<dyn GpuBackend>> {
        let refs = || sel.wanted.iter().map(|w| &w.reference);
        let mut v: Vec<Box<dyn GpuBackend>> = Vec::new();
        let nvidia = refs().any(|r| {
            matches!(
                r,
                GpuRef::NvidiaMinor(_)
                    | GpuRef::Uuid(_)
                    | GpuRef::PciBusId(_)
                    | GpuRef::AllAccessible
            )
        });
        let amd = refs().any(|r| {
            matches!(
                r,
                GpuRef::DrmMinor(_) | GpuRef::Uuid(_) | GpuRef::PciBusId(_)
            )
        });
        if self.nvidia && nvidia {
            v.push(Box::new(NvmlBackend::new(NvmlConfig {
                lib_path: self.nvml_lib_path.clone(),
                give_up_after: self.give_up_after,
                dcgm: self.dcgm.clone(),
                dcgm_interval: self.drain_interval,
            })));
        }
        if self.amd && amd {
            v.push(Box::new(AmdBackend::new(self.sysfs_root.clone())));
        }
        v
    }
}

/// Where and how the monitor writes.
pub struct MonitorOptions {
    /// The job's spool directory on this node (`<spool>/<job>.<node>/`).
    pub job_dir: PathBuf,
    /// The node-job header (`series` is set to `gpu`).
    pub header: Header,
    pub schedule: Schedule,
    pub open_timeout: Duration,
    pub sample_timeout: Duration,
    pub limits: GpuLimits,
    /// See [`BackendConfig::drain_interval`].
    pub drain_interval: Duration,
}

/// What a sample in progress at `stop` leaves of the stop's wait for the last sample and the end
/// record (at most a third of the wait).
const FINISH_RESERVE: Duration = Duration::from_millis(300);

use jobscope_model::gpu::EVENT_SLOT_PREFIX;

/// What the monitor has done so far (for tests, benchmarks and the plugin's own log).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Progress {
    /// Backends opened (or failed to).
    pub opened: bool,
    pub devices: usize,
    pub samples_taken: u64,
    /// Schedule slots skipped or samples in which no device answered.
    pub samples_missed: u64,
    /// Drains of the driver's buffers between samples.
    pub drains: u64,
    /// Why no GPU is sampled, when none is.
    pub unavailable: Option<String>,
}

/// A running GPU monitor.
pub struct GpuMonitor {
    stop: Option<Sender<()>>,
    /// Set by `stop`: backend waits on a slow driver end there.
    cutoff: Cutoff,
    thread: Option<JoinHandle<()>>,
    done: Arc<AtomicBool>,
    progress: Arc<Mutex<Progress>>,
}

impl GpuMonitor {
    /// Starts the GPU monitor of a job: one thread that opens the backends for `selection`
    /// (NVML and/or amdgpu per `backend`), writes `<job_dir>/gpu.jsc` and samples on `schedule`.
    ///
    /// An empty selection without notes (a job without GPUs) starts nothing and writes nothing.
    /// Only an error to spawn the thread is returned; everything else is logged and recorded.
    pub fn start(
        selection: GpuSelection,
        backend: &BackendConfig,
        job_dir: &Path,
        header: Header,
        schedule: Schedule,
        pids: PidSource,
        log: GpuLogFn,
    ) -> std::io::Result<GpuMonitor> {
        let backends = backend.backends_for(&selection);
        let opts = MonitorOptions {
            job_dir: job_dir.to_path_buf(),
            header,
            schedule,
            open_timeout: backend.open_timeout,
            sample_timeout: backend.sample_timeout,
            limits: GpuLimits {
                max_bytes: backend.max_file_bytes,
                ..GpuLimits::default()
            },
            drain_interval: backend.drain_interval,
        };
        Self::start_with(selection, backends, opts, pids, log)
    }

    /// [`GpuMonitor::start`] with explicit backends (tests use [`super::testing::ScriptedBackend`]).
    pub fn start_with(
        selection: GpuSelection,
        backends: Vec<Box<dyn GpuBackend>>,
        opts: MonitorOptions,
        pids: PidSource,
        log: GpuLogFn,
    ) -> std::io::Result<GpuMonitor> {
        let done = Arc::new(AtomicBool::new(false));
        let progress = Arc::new(Mutex::new(Progress::default()));
        if selection.wanted.is_empty() && selection.notes.is_empty() {
            done.store(true, Ordering::Release);
            return Ok(GpuMonitor {
                stop: None,
                cutoff: Cutoff::default(),
                thread: None,
                done,
                progress,
            });
        }
        let cutoff = Cutoff::default();
        let mut backends = backends;
        for b in backends.iter_mut() {
            b.set_cutoff(cutoff.clone());
        }
        let (tx, rx) = channel::<()>();
        let (done2, progress2) = (done.clone(), progress.clone());
        let thread = std::thread::Builder::new()
            .name("jobscope-gpu".into())
            .stack_size(256 * 1024)
            .spawn(move || {
                let log = Rc::new(log);
                let log2 = log.clone();
                let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    let mut run = Run {
                        selection,
                        backends,
                        opts,
                        pids,
                        log: log2,
                        progress: progress2,
                        writer: None,
                        slot_offsets: vec![],
                        devices: vec![],
                        prev: vec![],
                        xids_kept: vec![],
                        folds: vec![],
                        drains: 0,
                        logged_write_error: false,
                        timeouts_seen: 0,
                    };
                    run.main(&rx);
                }));
                if let Err(p) = result {
                    let msg = crate::sampler::panic_message(p.as_ref());
                    (*log)(
                        LogLevel::Error,
                        &format!("GPU monitor panicked, GPU sampling stopped for this job: {msg}"),
                    );
                }
                done2.store(true, Ordering::Release);
            })?;
        Ok(GpuMonitor {
            stop: Some(tx),
            cutoff,
            thread: Some(thread),
            done,
            progress,
        })
    }

    pub fn progress(&self) -> Progress {
        self.progress.lock().map(|p| p.clone()).unwrap_or_default()
    }

    /// True once the thread has finished (stopped, no GPUs, or panicked).
    pub fn finished(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// Asks the thread to take a last sample and write the end record, without waiting: a
    /// sample waiting on the driver ends early enough before `deadline` for the end record to be
    /// written. Idempotent (an earlier cutoff stays).
    pub fn signal_stop(&mut self, deadline: Instant) {
        let wait = deadline.saturating_duration_since(Instant::now());
        let reserve = FINISH_RESERVE.min(wait / 3);
        self.cutoff
            .set(deadline.checked_sub(reserve).unwrap_or(deadline));
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }

    /// Signals the thread ([`GpuMonitor::signal_stop`]) and waits until `deadline` at most.
    /// Returns whether it finished in time; a thread that did not (a hung driver) is left
    /// detached: slurmstepd is never held up by jobscope.
    pub fn stop_by(mut self, deadline: Instant) -> bool {
        self.signal_stop(deadline);
        if !crate::sampler::wait_until(&self.done, deadline) {
            return false;
        }
        self.thread.take().is_none_or(|t| t.join().is_ok())
    }

    /// [`GpuMonitor::stop_by`] with a wait of `wait` from now.
    pub fn stop(self, wait: Duration) -> bool {
        self.stop_by(Instant::now() + wait)
    }
}

impl crate::sampler::Stoppable for GpuMonitor {
    fn signal_stop(&mut self, deadline: Instant) {
        GpuMonitor::signal_stop(self, deadline);
    }
    fn wait_stopped(self: Box<Self>, deadline: Instant) -> bool {
        self.stop_by(deadline)
    }
}

/// The monitor thread's state.
struct Run {
    selection: GpuSelection,
    backends: Vec<Box<dyn GpuBackend>>,
    opts: MonitorOptions,
    pids: PidSource,
    log: Rc<GpuLogFn>,
    progress: Arc<Mutex<Progress>>,
    writer: Option<GpuWriter>,
    /// First slot of each backend.
    slot_offsets: Vec<usize>,
    devices: Vec<GpuDevice>,
    /// Last cumulative counters per slot (deltas are taken between consecutive samples).
    prev: Vec<Counters>,
    /// XID events recorded so far per slot (at most [`MAX_XID_EVENTS`]; the buckets count all).
    xids_kept: Vec<usize>,
    /// Per slot: the drains of the bucket in progress.
    folds: Vec<IntervalFold>,
    drains: u64,
    logged_write_error: bool,
    /// `nvml_timeout` events so far: only the first is logged above debug level (a driver
    /// that is slow on every call must not write a log line per sample for the whole job).
    timeouts_seen: u64,
}

impl Run {
    fn log(&self, level: LogLevel, msg: &str) {
        (*self.log)(level, msg)
    }

    fn update(&self, f: impl FnOnce(&mut Progress)) {
        if let Ok(mut p) = self.progress.lock() {
            f(&mut p);
        }
    }

    fn write<T>(&mut self, r: Result<T, jobscope_common::fsutil::FsError>) {
        if let Err(e) = r {
            if !self.logged_write_error {
                self.logged_write_error = true;
                self.log(
                    LogLevel::Error,
                    &format!("gpu spool write failed, GPU sampling continues: {e}"),
                );
            }
        }
    }

    fn main(&mut self, stop: &std::sync::mpsc::Receiver<()>) {
        match GpuWriter::create(
            &self.opts.job_dir,
            GPU_FILE_NAME,
            self.opts.header.clone(),
            self.opts.limits,
        ) {
            Ok(w) => self.writer = Some(w),
            Err(e) => {
                self.log(
                    LogLevel::Error,
                    &format!("cannot create the GPU spool file, GPUs not sampled: {e}"),
                );
                self.update(|p| p.opened = true);
                return;
            }
        }
        let start = Instant::now();
        self.open();
        if self.devices.is_empty() {
            self.finish("no_gpus", 0, 0);
            return;
        }
        let (mut taken, mut missed) = (0u64, 0u64);
        let mut i = 0u64;
        loop {
            let deadline = Instant::now() + self.opts.sample_timeout;
            if self.sample_once(deadline) {
                taken += 1;
            } else {
                taken += 1;
                missed += 1;
            }
            self.update(|p| {
                p.samples_taken = taken;
                p.samples_missed = missed;
            });
            if taken % 4 == 0 {
                if let Some(w) = self.writer.as_mut() {
                    let _ = w.flush();
                }
            }
            i += 1;
            let mut next = self.opts.schedule.offset(i);
            while start + next < Instant::now() {
                missed += 1;
                i += 1;
                next = self.opts.schedule.offset(i);
            }
            if !self.wait_draining(stop, start + next) {
                break;
            }
        }
        // The last sample closes the energy and utilization series at the job's end. Backends
        // end it at the stop's cutoff, leaving time for the end record within the stop's wait:
        // else a slow driver (a sample deadline longer than the wait) would cost the end record.
        taken += 1;
        if !self.sample_once(Instant::now() + self.opts.sample_timeout) {
            missed += 1;
        }
        self.update(|p| {
            p.samples_taken = taken;
            p.samples_missed = missed;
        });
        self.finish("stopped", taken, missed);
    }

    /// Waits for the slot due at `slot`, draining the buffers every `drain_interval` meanwhile.
    /// False when the monitor was told to stop.
    fn wait_draining(&mut self, stop: &std::sync::mpsc::Receiver<()>, slot: Instant) -> bool {
        // Never a busy loop, whatever the options say.
        let every = self.opts.drain_interval.max(Duration::from_millis(50));
        let mut drains_wanted = true;
        loop {
            let now = Instant::now();
            let until = if drains_wanted {
                slot.min(now + every)
            } else {
                slot
            };
            match stop.recv_timeout(until.saturating_duration_since(now)) {
                Err(RecvTimeoutError::Timeout) => {}
                _ => return false,
            }
            // A drain right before the slot is the slot's own (it drains too).
            if Instant::now() + every / 4 >= slot {
                return true;
            }
            drains_wanted = self.drain_once(Instant::now() + self.opts.sample_timeout);
        }
    }

    /// Drains every backend that keeps a buffer into the folds. False when none does.
    fn drain_once(&mut self, deadline: Instant) -> bool {
        let t_ms = now_unix_ms();
        let mut any = false;
        let mut pids: Option<Vec<u32>> = None;
        let mut events = Vec::new();
        let mut backends = std::mem::take(&mut self.backends);
        for (bi, b) in backends.iter_mut().enumerate() {
            let base = self.slot_offsets.get(bi).copied().unwrap_or(0);
            let Some(d) = b.drain(deadline) else {
                continue;
            };
            any = true;
            // The job's processes, for its share (asked once per drain, only when needed).
            let pids = pids.get_or_insert_with(|| {
                let mut p = (self.pids)();
                p.sort_unstable();
                p.dedup();
                p
            });
            for (k, dd) in d.devices.into_iter().enumerate() {
                if let (Some(dd), Some(f)) = (dd, self.folds.get_mut(base + k)) {
                    f.add(&dd, pids);
                }
            }
            for e in d.events {
                events.push((e.slot.map(|s| base + s), e));
            }
        }
        self.backends = backends;
        for (slot, e) in events {
            self.record(t_ms, slot, e);
        }
        if any {
            self.drains += 1;
            let n = self.drains;
            self.update(|p| p.drains = n);
        }
        any
    }

    fn open(&mut self) {
        let deadline = Instant::now() + self.opts.open_timeout;
        let mut remaining: Vec<usize> = (0..self.selection.wanted.len()).collect();
        let mut info = GpuInfo {
            t_ms: now_unix_ms(),
            backends: vec![],
            selection_source: Some(self.selection.source),
            devices: vec![],
            unresolved: vec![],
            notes: self.selection.notes.clone(),
        };
        let mut events: Vec<(Option<usize>, GpuEvent)> = Vec::new();
        // "NVML not available" matters only if a GPU stayed unresolved (an AMD job on a node
        // without NVML is normal): kept aside until the end.
        let mut backend_notes: Vec<String> = Vec::new();
        let mut backends = std::mem::take(&mut self.backends);
        for b in backends.iter_mut() {
            self.slot_offsets.push(self.devices.len());
            if remaining.is_empty() {
                continue; // an earlier backend found everything: do not even load this one
            }
            let wanted: Vec<Wanted> = remaining
                .iter()
                .map(|&i| self.selection.wanted[i].clone())
                .collect();
            let mut o = b.open(&wanted, deadline);
            info.notes.append(&mut o.notes);
            if let Some(why) = &o.unavailable {
                let level = if o.quiet {
                    LogLevel::Debug
                } else {
                    LogLevel::Error
                };
                self.log(level, why);
                backend_notes.push(why.clone());
            }
            let base = self.devices.len();
            for e in o.events {
                events.push((e.slot.map(|s| base + s), e));
            }
            let mut used = Vec::new();
            for (wi, id) in o.devices {
                used.push(remaining[wi]);
                self.devices.push(id);
            }
            if !self.devices[base..].is_empty() {
                info.backends.push(b.name().to_string());
            }
            remaining.retain(|i| !used.contains(i));
        }
        self.backends = backends;
        if !remaining.is_empty() {
            info.notes.append(&mut backend_notes);
        }
        for i in remaining {
            let w = &self.selection.wanted[i];
            info.unresolved.push(match w.gres_index {
                Some(g) => format!("{} (gres index {g})", w.reference),
                None => w.reference.to_string(),
            });
        }
        if !info.unresolved.is_empty() && !self.devices.is_empty() {
            self.log(
                LogLevel::Info,
                &format!(
                    "some of the job's GPUs were not found: {}",
                    info.unresolved.join(", ")
                ),
            );
        }
        info.devices = self.devices.clone();
        self.prev = vec![Counters::default(); self.devices.len()];
        self.xids_kept = vec![0; self.devices.len()];
        self.folds = vec![IntervalFold::default(); self.devices.len()];
        let n = self.devices.len();
        let unavailable = (n == 0).then(|| {
            if info.notes.is_empty() {
                "no GPU of the job was found".to_string()
            } else {
                info.notes.join("; ")
            }
        });
        self.update(|p| {
            p.opened = true;
            p.devices = n;
            p.unavailable = unavailable;
        });
        let t = now_unix_ms();
        let r = self.writer.as_mut().map(|w| w.set_info(info));
        if let Some(r) = r {
            self.write(r);
        }
        for (slot, e) in events {
            self.record(t, slot, e);
        }
    }

    fn record(&mut self, t_ms: u64, slot: Option<usize>, e: GpuEvent) {
        let who = slot
            .and_then(|s| self.devices.get(s))
            .map(|d| format!("{}: ", d.identity.label()))
            .unwrap_or_default();
        let message = format!("{who}{}", e.message);
        let level = match e.kind {
            EventKind::GpuLost | EventKind::NvmlGaveUp => LogLevel::Error,
            EventKind::NvmlTimeout => {
                self.timeouts_seen += 1;
                if self.timeouts_seen == 1 {
                    LogLevel::Info
                } else {
                    LogLevel::Debug
                }
            }
            _ => LogLevel::Info,
        };
        self.log(level, &message);
        let ev = Event {
            t_ms,
            kind: e.kind,
            step: slot.map(|s| format!("{EVENT_SLOT_PREFIX}{s}")),
            job: None,
            step_reading: None,
            exit_status: None,
            message: Some(message),
        };
        let r = self.writer.as_mut().map(|w| w.event(ev));
        if let Some(r) = r {
            self.write(r);
        }
    }

    /// One sample of all backends; false when no device answered.
    fn sample_once(&mut self, deadline: Instant) -> bool {
        let t_ms = now_unix_ms();
        let mut pids = (self.pids)();
        pids.sort_unstable();
        pids.dedup();
        let mut bucket = GpuBucket {
            t_first_ms: t_ms,
            t_last_ms: t_ms,
            n: 1,
            devices: vec![],
        };
        let mut events = Vec::new();
        let mut xid_events: Vec<(usize, u64, u32)> = Vec::new();
        let mut backends = std::mem::take(&mut self.backends);
        for (bi, b) in backends.iter_mut().enumerate() {
            let base = self.slot_offsets.get(bi).copied().unwrap_or(0);
            let s = b.sample(&pids, deadline);
            for (k, d) in s.devices.into_iter().enumerate() {
                let slot = base + k;
                if slot >= self.devices.len() {
                    break;
                }
                if let Some(d) = d {
                    let mut db = device_bucket(slot as u32, &d, &mut self.prev[slot]);
                    if let Some(x) = &d.xids {
                        for &(t, code) in &x.first {
                            if self.xids_kept[slot] < MAX_XID_EVENTS {
                                self.xids_kept[slot] += 1;
                                xid_events.push((slot, t, code));
                            }
                        }
                    }
                    if let Some(dr) = &d.drain {
                        self.folds[slot].add(dr, &pids);
                    }
                    // The interval's figures where drains gave any; else the point read, said
                    // to be one. (A device that misses this sample keeps its fold for the next.)
                    let fig = self.folds[slot].take();
                    if !fig.is_empty() {
                        fig.apply(&mut db);
                    } else if db.util_gpu_pct.is_some() {
                        db.util_flags = Some(UTIL_FROM_POINT_READS);
                    }
                    bucket.devices.push(db);
                }
            }
            for e in s.events {
                events.push((e.slot.map(|s| base + s), e));
            }
        }
        self.backends = backends;
        for (slot, e) in events {
            self.record(t_ms, slot, e);
        }
        for (slot, t, code) in xid_events {
            self.record_xid(t, slot, code);
        }
        if bucket.devices.is_empty() {
            return false;
        }
        let r = self.writer.as_mut().map(|w| w.push(bucket));
        if let Some(r) = r {
            self.write(r);
        }
        true
    }

    /// One XID error as a `gpu_xid` event, its code in `exit_status` (an admin's fact: logged
    /// at info level, never to the job's output).
    fn record_xid(&mut self, t_ms: u64, slot: usize, code: u32) {
        let who = self
            .devices
            .get(slot)
            .map(|d| d.identity.label())
            .unwrap_or_default();
        let message = format!("{who}: XID {code}");
        self.log(LogLevel::Info, &message);
        let ev = Event {
            t_ms,
            kind: EventKind::GpuXid,
            step: Some(format!("{EVENT_SLOT_PREFIX}{slot}")),
            job: None,
            step_reading: None,
            exit_status: i32::try_from(code).ok(),
            message: Some(message),
        };
        let r = self.writer.as_mut().map(|w| w.event(ev));
        if let Some(r) = r {
            self.write(r);
        }
    }

    fn finish(&mut self, reason: &str, taken: u64, missed: u64) {
        let end = End {
            t_ms: now_unix_ms(),
            reason: reason.into(),
            samples_taken: taken,
            samples_missed: missed,
        };
        let r = self.writer.as_mut().map(|w| w.end(&end));
        if let Some(Err(e)) = r {
            self.log(
                LogLevel::Error,
                &format!("could not write the GPU spool end record: {e}"),
            );
        }
    }
}

/// XID events kept per device and job (the buckets' `xid_errors` count every one): a GPU in
/// an XID storm must not fill the spool's events.
pub const MAX_XID_EVENTS: usize = 32;

/// A device's cumulative counters at its last sample.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counters {
    pub energy_mj: Option<u64>,
    pub violation_power_ns: Option<u64>,
    pub violation_thermal_ns: Option<u64>,
    pub ecc_corrected: Option<u64>,
    pub ecc_uncorrected: Option<u64>,
}

/// The increase of a cumulative counter since `prev` (which becomes `now` when there is one):
/// `None` without a previous reading or when the counter went back (a driver reload).
fn increase(prev: &mut Option<u64>, now: Option<u64>) -> Option<u64> {
    let d = match (*prev, now) {
        (Some(a), Some(b)) if a <= b => Some(b - a),
        _ => None,
    };
    if now.is_some() {
        *prev = now;
    }
    d
}

/// One device's reading as a one-sample bucket entry; `prev` holds the slot's last counters.
pub fn device_bucket(slot: u32, d: &DeviceSample, prev: &mut Counters) -> DeviceBucket {
    let energy_mj = increase(&mut prev.energy_mj, d.energy_mj);
    let ns_to_ms = |ns: u64| ns / 1_000_000;
    let throttle_power_ms =
        increase(&mut prev.violation_power_ns, d.violation_power_ns).map(ns_to_ms);
    let throttle_thermal_ms =
        increase(&mut prev.violation_thermal_ns, d.violation_thermal_ns).map(ns_to_ms);
    let ecc_corrected = increase(&mut prev.ecc_corrected, d.ecc_corrected_total);
    let ecc_uncorrected = increase(&mut prev.ecc_uncorrected, d.ecc_uncorrected_total);
    let g = |v: Option<u64>| v.map(Gauge::one);
    let g32 = |v: Option<u32>| v.map(|x| Gauge::one(u64::from(x)));
    DeviceBucket {
        slot,
        samples: 1,
        util_gpu_pct: g(d.util_gpu_pct.map(u64::from)),
        util_mem_pct: g(d.util_mem_pct.map(u64::from)),
        mem_used_bytes: g(d.mem_used_bytes),
        power_mw: g(d.power_mw),
        job_processes: g(d.job_processes.map(u64::from)),
        job_mem_bytes: g(d.job_mem_bytes),
        other_processes: g(d.other_processes.map(u64::from)),
        energy_mj,
        energy_counter_mj: d.energy_mj,
        mem_total_bytes: d.mem_total_bytes,
        throttle_reasons: d.throttle_reasons,
        // Set from the interval's drains by the monitor.
        job_util_gpu_pct: None,
        job_util_mem_pct: None,
        util_flags: None,
        util_covered_ms: None,
        sm_active_permille: g32(d.sm_active_permille),
        sm_occupancy_permille: g32(d.sm_occupancy_permille),
        tensor_active_permille: g32(d.tensor_active_permille),
        dram_active_permille: g32(d.dram_active_permille),
        sm_clock_mhz: g32(d.sm_clock_mhz),
        mem_clock_mhz: g32(d.mem_clock_mhz),
        throttle_power_ms,
        throttle_thermal_ms,
        ecc_corrected,
        ecc_uncorrected,
        xid_errors: d.xids.as_ref().map(|x| x.count),
    }
}

/// The pids of a cgroup and its descendants (each sample), e.g. the job's v1 memory directory
/// or v2 directory. Bounded walk (depth 8, 4096 cgroups); a vanished sub-cgroup is skipped.
pub fn cgroup_pid_source(job_cgroup_dir: PathBuf) -> PidSource {
    Box::new(move || cgroup_pids(&job_cgroup_dir))
}

/// See [`cgroup_pid_source`].
pub fn cgroup_pids(dir: &Path) -> Vec<u32> {
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), 0usize)];
    let mut visited = 0usize;
    while let Some((d, depth)) = stack.pop() {
        visited += 1;
        if let Ok(mut p) = crate::cgroup::read_cgroup_procs(&d) {
            out.append(&mut p);
        }
        if depth >= 8 {
            continue;
        }
        if let Ok(rd) = std::fs::read_dir(&d) {
            for e in rd.flatten() {
                if visited + stack.len() >= 4096 {
                    break;
                }
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push((e.path(), depth + 1));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::assign::{GpuRef, SelectionSource};
    use crate::gpu::testing::ScriptedBackend;
    use crate::gpu::{GpuIdentity, GpuKind};
    use jobscope_common::spool::read_gpu_file;

    fn header() -> Header {
        Header {
            format_version: crate::spool::FORMAT_VERSION,
            job_id: 5,
            node: "n1".into(),
            series: "job".into(),
            uid: 1,
            gid: 1,
            cgroup_version: None,
            cgroup_path: None,
            io_source: None,
            boot_id: None,
            boot_time_s: None,
            start_unix_ms: now_unix_ms(),
            cadence_s: 1,
            plugin_version: "t".into(),
            alloc_cores: None,
            alloc_mem_bytes: None,
            handover: None,
        }
    }

    fn id(kind: GpuKind, minor: u32, uuid: &str) -> GpuDevice {
        GpuDevice {
            identity: GpuIdentity {
                kind: Some(kind),
                minor: Some(minor),
                uuid: Some(uuid.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn opts(dir: &Path, cadence_ms: u64) -> MonitorOptions {
        MonitorOptions {
            job_dir: dir.to_path_buf(),
            header: header(),
            schedule: Schedule {
                early: vec![],
                cadence: Duration::from_millis(cadence_ms),
            },
            open_timeout: Duration::from_secs(5),
            sample_timeout: Duration::from_secs(1),
            limits: GpuLimits::default(),
            drain_interval: DEFAULT_DRAIN_INTERVAL,
        }
    }

    fn quiet() -> GpuLogFn {
        Box::new(|_, _| {})
    }

    /// How long a test waits for the monitor to do something that takes it milliseconds: a bound
    /// for a loaded machine, never the measure of the behaviour under test.
    const GENEROUS: Duration = Duration::from_secs(30);

    /// Stops `m` the way the plugin does, with a wait of `plugin_wait` (its cutoff: the sample in
    /// progress and the last one end early enough for the end record), then waits for it at most
    /// [`GENEROUS`] (a test on a loaded machine). Whether it finished by then.
    fn stop_as_plugin(mut m: GpuMonitor, plugin_wait: Duration) -> bool {
        m.signal_stop(Instant::now() + plugin_wait);
        // The earlier cutoff stays (`signal_stop` is idempotent): this only waits longer.
        m.stop(GENEROUS)
    }

    fn wait_for(m: &GpuMonitor, samples: u64) {
        let t = Instant::now();
        while m.progress().samples_taken < samples && t.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn gpu_monitor_no_gpus_starts_nothing_and_writes_nothing() {
        let d = tempfile::tempdir().unwrap();
        let m = GpuMonitor::start_with(
            GpuSelection::of([]),
            vec![],
            opts(d.path(), 10),
            Box::new(Vec::new),
            quiet(),
        )
        .unwrap();
        assert!(m.finished());
        assert!(m.stop(Duration::ZERO));
        assert!(!d.path().join(GPU_FILE_NAME).exists());
    }

    #[test]
    fn gpu_monitor_samples_the_selected_device_with_sorted_job_pids() {
        let d = tempfile::tempdir().unwrap();
        let b = ScriptedBackend::new(
            vec![
                id(GpuKind::Nvidia, 0, "GPU-zero"),
                id(GpuKind::Nvidia, 3, "GPU-three"),
            ],
            |n, pids| {
                assert_eq!(pids, &[3, 5], "sorted, deduplicated");
                vec![Some(DeviceSample {
                    util_gpu_pct: Some(n as u32 % 100),
                    energy_mj: Some(1000 + 10 * n),
                    job_processes: Some(1),
                    ..Default::default()
                })]
            },
        );
        let sel = GpuSelection {
            wanted: vec![Wanted {
                reference: GpuRef::NvidiaMinor(3),
                gres_index: Some(1),
            }],
            source: SelectionSource::GresConf,
            notes: vec![],
        };
        let m = GpuMonitor::start_with(
            sel,
            vec![Box::new(b)],
            opts(d.path(), 5),
            Box::new(|| vec![5, 3, 3]),
            quiet(),
        )
        .unwrap();
        wait_for(&m, 10);
        assert_eq!(m.progress().devices, 1);
        assert!(m.stop(Duration::from_secs(10)));
        let s = read_gpu_file(&d.path().join(GPU_FILE_NAME)).unwrap();
        let info = s.info.clone().unwrap();
        assert_eq!(info.devices[0].identity.uuid.as_deref(), Some("GPU-three"));
        assert_eq!(info.devices[0].identity.gres_index, Some(1));
        assert_eq!(info.backends, vec!["scripted"]);
        assert_eq!(info.selection_source, Some(SelectionSource::GresConf));
        let end = s.end.unwrap();
        assert_eq!(end.reason, "stopped");
        let n = s.buckets.iter().map(|b| b.n as u64).sum::<u64>();
        // Every attempted sample answered (`samples_missed` also counts skipped schedule slots).
        assert_eq!(n, end.samples_taken);
        assert!(n >= 10);
        // Energy deltas: 10 mJ per sample after the first.
        let e: u64 = s
            .buckets
            .iter()
            .filter_map(|b| b.device(0)?.energy_mj)
            .sum();
        assert_eq!(e, 10 * (n - 1));
        assert_eq!(s.buckets[0].device(0).unwrap().energy_mj, None);
    }

    #[test]
    fn gpu_monitor_two_backends_share_the_wanted_list() {
        let d = tempfile::tempdir().unwrap();
        let nv = ScriptedBackend::new(vec![id(GpuKind::Nvidia, 0, "GPU-nv")], |_, _| {
            vec![Some(DeviceSample {
                util_gpu_pct: Some(7),
                ..Default::default()
            })]
        });
        let amd = ScriptedBackend::new(vec![id(GpuKind::Amd, 128, "GPU-amd")], |_, _| {
            vec![Some(DeviceSample {
                util_gpu_pct: Some(9),
                ..Default::default()
            })]
        });
        let sel = GpuSelection::of([
            GpuRef::DrmMinor(128),
            GpuRef::NvidiaMinor(0),
            GpuRef::NvidiaMinor(9),
        ]);
        let (logs, log): (Arc<Mutex<Vec<String>>>, _) = {
            let l: Arc<Mutex<Vec<String>>> = Arc::default();
            let l2 = l.clone();
            let f: GpuLogFn = Box::new(move |_, m| l2.lock().unwrap().push(m.to_string()));
            (l, f)
        };
        let m = GpuMonitor::start_with(
            sel,
            vec![Box::new(nv), Box::new(amd)],
            opts(d.path(), 5),
            Box::new(Vec::new),
            log,
        )
        .unwrap();
        wait_for(&m, 3);
        assert!(m.stop(Duration::from_secs(10)));
        let s = read_gpu_file(&d.path().join(GPU_FILE_NAME)).unwrap();
        let info = s.info.unwrap();
        let uuids: Vec<_> = info
            .devices
            .iter()
            .map(|d| d.identity.uuid.clone().unwrap())
            .collect();
        assert_eq!(uuids, ["GPU-nv", "GPU-amd"]);
        assert_eq!(info.unresolved, vec!["/dev/nvidia9"]);
        assert!(info.notes.is_empty(), "{:?}", info.notes);
        let b = &s.buckets[0];
        assert_eq!(b.device(0).unwrap().util_gpu_pct.unwrap().max, 7);
        assert_eq!(b.device(1).unwrap().util_gpu_pct.unwrap().max, 9);
        assert!(logs.lock().unwrap()[0].contains("/dev/nvidia9"));
    }

    #[test]
    fn gpu_monitor_unavailable_backend_is_a_note_only_when_a_gpu_stayed_unresolved() {
        let run = |refs: Vec<GpuRef>| {
            let d = tempfile::tempdir().unwrap();
            let mut nv = ScriptedBackend::new(vec![], |_, _| vec![]);
            nv.unavailable = Some("NVML not available: no library".into());
            let amd = ScriptedBackend::new(vec![id(GpuKind::Amd, 128, "GPU-amd")], |_, _| {
                vec![Some(DeviceSample::default())]
            });
            let m = GpuMonitor::start_with(
                GpuSelection::of(refs),
                vec![Box::new(nv), Box::new(amd)],
                opts(d.path(), 5),
                Box::new(Vec::new),
                quiet(),
            )
            .unwrap();
            wait_for(&m, 1);
            assert!(m.stop(Duration::from_secs(10)));
            read_gpu_file(&d.path().join(GPU_FILE_NAME))
                .unwrap()
                .info
                .unwrap()
        };
        let info = run(vec![GpuRef::Uuid("GPU-amd".into())]);
        assert_eq!(info.devices.len(), 1);
        assert!(info.notes.is_empty(), "{:?}", info.notes);
        let info = run(vec![
            GpuRef::Uuid("GPU-amd".into()),
            GpuRef::Uuid("GPU-gone".into()),
        ]);
        assert_eq!(info.unresolved, vec!["GPU-gone"]);
        assert_eq!(info.notes, vec!["NVML not available: no library"]);
    }

    #[test]
    fn gpu_monitor_panicking_backend_is_contained() {
        let d = tempfile::tempdir().unwrap();
        let b = ScriptedBackend::new(vec![id(GpuKind::Nvidia, 0, "GPU-x")], |n, _| {
            if n == 2 {
                panic!("scripted backend panic");
            }
            vec![Some(DeviceSample::default())]
        });
        let logs: Arc<Mutex<Vec<(LogLevel, String)>>> = Arc::default();
        let l2 = logs.clone();
        let m = GpuMonitor::start_with(
            GpuSelection::of([GpuRef::NvidiaMinor(0)]),
            vec![Box::new(b)],
            opts(d.path(), 5),
            Box::new(Vec::new),
            Box::new(move |lvl, msg| l2.lock().unwrap().push((lvl, msg.to_string()))),
        )
        .unwrap();
        let t = Instant::now();
        while !m.finished() && t.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(m.finished());
        assert!(m.stop(GENEROUS));
        let logs = logs.lock().unwrap();
        assert!(logs
            .iter()
            .any(|(l, m)| *l == LogLevel::Error && m.contains("scripted backend panic")));
        // What was written before the panic is readable.
        let s = read_gpu_file(&d.path().join(GPU_FILE_NAME)).unwrap();
        assert_eq!(s.buckets.len(), 2);
        assert!(s.end.is_none());
    }

    /// The job ends while a sample waits on a slow driver (60 s a sample, deadline 120 s, the
    /// plugin's wait 1.5 s): the wait is cut short at the stop's cutoff, the last sample taken, and
    /// the end record written. Finishing at all within [`GENEROUS`] (half the driver's 60 s) is
    /// what shows the slow sample was cut, not waited out.
    #[test]
    fn gpu_monitor_stop_during_a_slow_sample_still_writes_the_end_record() {
        let d = tempfile::tempdir().unwrap();
        let mut b = ScriptedBackend::new(vec![id(GpuKind::Nvidia, 0, "GPU-x")], |_, _| {
            vec![Some(DeviceSample::default())]
        });
        b.sample_delay = Some(Duration::from_secs(60));
        let mut o = opts(d.path(), 10);
        o.sample_timeout = Duration::from_secs(120);
        let m = GpuMonitor::start_with(
            GpuSelection::of([GpuRef::NvidiaMinor(0)]),
            vec![Box::new(b)],
            o,
            Box::new(Vec::new),
            quiet(),
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(300)); // inside the first (60 s) sample
        assert!(
            stop_as_plugin(m, Duration::from_millis(1500)),
            "the slow sample was cut short, not waited out"
        );
        let s = read_gpu_file(&d.path().join(GPU_FILE_NAME)).unwrap();
        let end = s.end.expect("end record written");
        assert_eq!((end.reason.as_str(), end.samples_taken), ("stopped", 2));
    }

    /// A backend stuck where it cannot see the cutoff: `stop` still returns at its bound.
    #[test]
    fn gpu_monitor_slow_backend_stop_is_bounded() {
        let d = tempfile::tempdir().unwrap();
        let mut b = ScriptedBackend::new(vec![id(GpuKind::Nvidia, 0, "GPU-x")], |_, _| {
            vec![Some(DeviceSample::default())]
        });
        b.sample_delay = Some(Duration::from_secs(60));
        b.ignore_cutoff = true;
        let mut o = opts(d.path(), 10);
        o.sample_timeout = Duration::from_secs(60);
        let m = GpuMonitor::start_with(
            GpuSelection::of([GpuRef::NvidiaMinor(0)]),
            vec![Box::new(b)],
            o,
            Box::new(Vec::new),
            quiet(),
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let t = Instant::now();
        assert!(
            !m.stop(Duration::from_millis(50)),
            "busy: not finished in time"
        );
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "but returned at its bound, not after the 60 s sample: {:?}",
            t.elapsed()
        );
    }

    /// A driver that turns slower than the stop's wait (10 min a sample after the first, the
    /// plugin's wait 1.5 s): the last sample is cut short at the stop's cutoff, so the end record
    /// is still written. Finishing at all within [`GENEROUS`] shows the last sample was cut.
    #[test]
    fn gpu_monitor_last_sample_leaves_time_for_the_end_record() {
        let d = tempfile::tempdir().unwrap();
        let mut b = ScriptedBackend::new(vec![id(GpuKind::Nvidia, 0, "GPU-x")], |_, _| {
            vec![Some(DeviceSample::default())]
        });
        b.sample_delay = Some(Duration::from_secs(600));
        b.fast_samples = 1;
        let mut o = opts(d.path(), 60_000);
        o.sample_timeout = Duration::from_secs(1200);
        let m = GpuMonitor::start_with(
            GpuSelection::of([GpuRef::NvidiaMinor(0)]),
            vec![Box::new(b)],
            o,
            Box::new(Vec::new),
            quiet(),
        )
        .unwrap();
        wait_for(&m, 1); // the first (fast) sample is done; the next is due in a minute
        assert!(
            stop_as_plugin(m, Duration::from_millis(1500)),
            "the last sample was cut short, not waited out"
        );
        let s = read_gpu_file(&d.path().join(GPU_FILE_NAME)).unwrap();
        let end = s.end.expect("end record written");
        assert_eq!(end.reason, "stopped");
        assert_eq!(end.samples_taken, 2);
    }

    /// GPU energy used after the last regular sample (work in the job's last seconds) is still
    /// counted: the stop takes one last reading of the energy counter.
    #[test]
    fn gpu_energy_at_the_very_end_is_counted() {
        let d = tempfile::tempdir().unwrap();
        let b = ScriptedBackend::new(vec![id(GpuKind::Nvidia, 0, "GPU-x")], |n, _| {
            vec![Some(DeviceSample {
                util_gpu_pct: Some(if n == 0 { 0 } else { 90 }),
                // 1000 J on the counter at the first reading; 500 J more by the stop's.
                energy_mj: Some(if n == 0 { 1_000_000 } else { 1_500_000 }),
                ..Default::default()
            })]
        });
        // The next regular sample is due only after a minute: the job ends before it.
        let m = GpuMonitor::start_with(
            GpuSelection::of([GpuRef::NvidiaMinor(0)]),
            vec![Box::new(b)],
            opts(d.path(), 60_000),
            Box::new(Vec::new),
            quiet(),
        )
        .unwrap();
        wait_for(&m, 1);
        assert!(m.stop(GENEROUS), "finished");
        let s = read_gpu_file(&d.path().join(GPU_FILE_NAME)).unwrap();
        let used_mj: u64 = s
            .buckets
            .iter()
            .flat_map(|b| b.devices.iter())
            .filter_map(|dev| dev.energy_mj)
            .sum();
        assert_eq!(used_mj, 500_000, "{:?}", s.buckets);
        let g = &crate::gpu::summarize_gpus(&s, 1.0)[0];
        let kwh = g.energy_kwh.expect("energy");
        assert!((kwh - 500_000.0 / 3.6e9).abs() < 1e-12, "{kwh}");
    }

    #[test]
    fn gpu_backends_for_selection() {
        let cfg = BackendConfig::default();
        let names = |sel: GpuSelection| -> Vec<&'static str> {
            cfg.backends_for(&sel).iter().map(|b| b.name()).collect()
        };
        assert_eq!(names(GpuSelection::of([GpuRef::NvidiaMinor(1)])), ["nvml"]);
        assert_eq!(names(GpuSelection::of([GpuRef::DrmMinor(128)])), ["amdgpu"]);
        assert_eq!(
            names(GpuSelection::of([GpuRef::Uuid("GPU-1".into())])),
            ["nvml", "amdgpu"]
        );
        assert!(names(GpuSelection::of([])).is_empty());
        let no_nv = BackendConfig {
            nvidia: false,
            ..Default::default()
        };
        assert!(no_nv
            .backends_for(&GpuSelection::of([GpuRef::AllAccessible]))
            .is_empty());
    }

    #[test]
    fn gpu_cgroup_pids_walks_the_tree() {
        let d = tempfile::tempdir().unwrap();
        let job = d.path().join("job_5");
        std::fs::create_dir_all(job.join("step_0/task_0")).unwrap();
        std::fs::write(job.join("cgroup.procs"), "").unwrap();
        std::fs::write(job.join("step_0/cgroup.procs"), "10\n").unwrap();
        std::fs::write(job.join("step_0/task_0/cgroup.procs"), "11\n12\n").unwrap();
        let mut p = cgroup_pids(&job);
        p.sort();
        assert_eq!(p, [10, 11, 12]);
        assert!(cgroup_pids(&d.path().join("gone")).is_empty());
    }
}
