//! Per-GPU figures and findings for the report, and advice. Pure: the epilog reads `gpu.jsc`
//! ([`super::spool::read_gpu_file`]), this computes. Findings and advice are typed facts with their
//! numbers ([`GpuFinding`], [`GpuAdvice`]); the words are the presenter's (`report/src/present/`).
//!
//! Time model: sample `i` at `t_i` stands for the interval `(t_{i-1}, t_i]` (a thinned bucket for
//! the interval from the previous bucket's end to its own end). An interval is **idle** when the
//! GPU's utilization never rose above [`GpuSummaryParams::idle_util_pct`] in it (the bucket's *max*,
//! so thinning cannot hide activity); where utilization is unknown (MIG) the job having no process
//! on the device counts as idle; where both are unknown the interval is unknown.
//!
//! Utilization is the bucket's interval figure where the driver's sample buffer was drained
//! ([`super::fold`]): its max is the busiest 200 ms of the interval, so a GPU busy only in bursts
//! between two reads is not idle, nor "never used". On a GPU shared with other processes the
//! job's own share (per-process samples) decides idleness, never the device's total.

use super::event_slot;
use super::fold::{UTIL_FROM_BUFFER, UTIL_FROM_POINT_READS, UTIL_OTHERS_ACTIVE};
use super::spool::{DeviceBucket, GpuSeries};
use super::{GpuDevice, GpuIdentity, GpuKind};
use crate::spool::EventKind;
use serde::{Deserialize, Serialize};

/// Thresholds of the findings (site-configurable).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GpuSummaryParams {
    /// At or below this utilization a GPU counts as idle.
    pub idle_util_pct: f64,
    /// Shortest idle period listed.
    pub idle_min_s: f64,
    /// A trailing idle stretch at least this long (and at least `tail_idle_min_share` of the job)
    /// is reported as "used at first, then idle".
    pub tail_idle_min_s: f64,
    pub tail_idle_min_share: f64,
    /// Mean utilization from which a GPU is `gpu_bound`.
    pub bound_util_pct: f64,
    /// Mean utilization below which a GPU is `gpu_idle`.
    pub idle_class_util_pct: f64,
    /// Advice "a MIG slice or a smaller GPU": peak memory at most this share of the GPU's...
    pub small_mem_share: f64,
    /// ...and mean utilization below this.
    pub low_util_pct: f64,
    /// A GPU whose kernels ran at least `bound_util_pct` of the time but whose mean SM activity
    /// (NVML GPM) stayed below this is `low_sm_activity`, not `gpu_bound`: the kernels occupied
    /// few of the SMs. Below half of the SMs busy on average, most of the GPU waited, whatever
    /// `utilization.gpu` says.
    pub low_sm_active_pct: f64,
    /// Throttle time (power cap or thermal) from which a GPU's slowdown is reported to the
    /// admins, seconds.
    pub throttle_report_min_s: f64,
}

impl Default for GpuSummaryParams {
    fn default() -> Self {
        GpuSummaryParams {
            idle_util_pct: 5.0,
            idle_min_s: 600.0,
            tail_idle_min_s: 1800.0,
            tail_idle_min_share: 0.2,
            bound_util_pct: 70.0,
            idle_class_util_pct: 10.0,
            small_mem_share: 0.25,
            low_util_pct: 30.0,
            low_sm_active_pct: 50.0,
            throttle_report_min_s: 60.0,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GpuClass {
    /// Busy most of the time.
    GpuBound,
    /// Allocated but (nearly) unused.
    GpuIdle,
    Mixed,
    /// Kernels ran most of the time but kept few of the SMs busy (SM activity below
    /// `low_sm_active_pct`): busy by `utilization.gpu`, wasted by SM activity.
    LowSmActivity,
}

/// One XID error NVML reported for a GPU during the job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct XidEvent {
    /// Seconds since the job started on the node (when the sampler polled it: NVML gives the
    /// event no time of its own).
    pub t_s: f64,
    /// The XID code (999: NVML did not know it).
    pub code: u32,
}
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GpuUtilSource {
    /// The driver's sample buffer, drained: every 200 ms of the interval (NVIDIA).
    DriverBuffer,
    /// Point reads (AMD; NVIDIA without the buffer): bursts between reads can be missed.
    PointReads,
    /// Some intervals from the buffer, some from point reads.
    Mixed,
}

/// A stretch of at least [`GpuSummaryParams::idle_min_s`] in which the GPU was idle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct IdlePeriod {
    /// Seconds since the job started on the node.
    pub start_s: f64,
    pub end_s: f64,
    pub duration_s: f64,
}

/// One GPU of the job on one node. Units are in the names; unknown is `None`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GpuSummary {
    pub node: Option<String>,
    /// Position in `gpu.jsc`'s device list.
    pub slot: u32,
    #[serde(flatten)]
    pub identity: GpuIdentity,
    /// Samples in which the device answered.
    pub samples: u64,
    pub util_mean_pct: Option<f64>,
    pub util_max_pct: Option<f64>,
    pub mem_util_mean_pct: Option<f64>,
    /// Where `util_*` come from (`None`: a spool written before jobscope said so).
    #[serde(default)]
    pub util_source: Option<GpuUtilSource>,
    /// Share of the buffer-sampled intervals the driver's samples covered (below 1 when drains
    /// came too late for the buffer).
    #[serde(default)]
    pub util_coverage_share: Option<f64>,
    /// The job's own share of the GPU's utilization, from its processes' samples (on a GPU shared
    /// with other jobs it is less than `util_mean_pct`).
    #[serde(default)]
    pub job_util_mean_pct: Option<f64>,
    #[serde(default)]
    pub job_util_max_pct: Option<f64>,
    #[serde(default)]
    pub job_mem_util_mean_pct: Option<f64>,
    /// The device never reported utilization (MIG instances: NVML answers NOT_SUPPORTED).
    pub utilization_unknown: bool,
    pub mem_peak_bytes: Option<u64>,
    pub mem_total_bytes: Option<u64>,
    /// Peak of the memory used by the job's own processes.
    pub job_mem_peak_bytes: Option<u64>,
    pub job_processes_max: Option<u64>,
    /// Someone else's processes ran (or had utilization) on this GPU during the job.
    pub other_processes_seen: bool,
    pub power_mean_w: Option<f64>,
    pub power_max_w: Option<f64>,
    pub energy_kwh: Option<f64>,
    /// `energy_kwh` integrates power samples (no energy counter on this device).
    pub energy_estimated: bool,
    pub idle_periods: Vec<IdlePeriod>,
    /// All idle time, seconds (also stretches shorter than `idle_min_s`).
    pub idle_s: Option<f64>,
    /// Time for which the device's state (idle or not) is known, seconds.
    pub observed_s: f64,
    /// Allocated, yet no utilization and no job process ever seen on it.
    pub never_used: bool,
    /// Used at first, then idle from this second (since job start) to the end.
    pub idle_after_s: Option<f64>,
    /// Length of that idle tail, seconds.
    pub idle_tail_s: Option<f64>,
    /// Device-hours allocated (a MIG slice counts as one device).
    pub gpu_hours_allocated: f64,
    /// Idle share × allocated (all of it when never used).
    pub gpu_hours_wasted: Option<f64>,
    pub classification: Option<GpuClass>,
    /// NVML throttle reasons seen (`sw_power_cap`, `hw_thermal_slowdown`…).
    pub throttle_reasons: Vec<String>,
    /// SM activity, mean over the job: the share of time the SMs had a warp assigned, averaged
    /// over the SMs (NVML GPM, Hopper and later; DCGM's `PROF_SM_ACTIVE`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_active_mean_pct: Option<f64>,
    /// SM occupancy, mean: resident warps against the maximum (NVML GPM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_occupancy_mean_pct: Option<f64>,
    /// Time any tensor pipe was active, mean (NVML GPM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensor_active_mean_pct: Option<f64>,
    /// DRAM bandwidth used against the peak, mean (NVML GPM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dram_active_mean_pct: Option<f64>,
    /// SM clock, mean of the point reads (the SM figures count cycles: under a power cap they
    /// are shares of fewer cycles).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_clock_mean_mhz: Option<f64>,
    /// Memory clock, mean of the point reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_clock_mean_mhz: Option<f64>,
    /// Time the power cap held the clocks down during the job (NVML violation counter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttle_power_s: Option<f64>,
    /// Time a thermal limit held the clocks down during the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttle_thermal_s: Option<f64>,
    /// Corrected ECC errors during the job (volatile counter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecc_corrected: Option<u64>,
    /// Uncorrected ECC errors during the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecc_uncorrected: Option<u64>,
    /// XID errors NVML reported during the job (`None`: NVML's events were not available).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xid_errors: Option<u64>,
    /// The first XID errors, with their codes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub xid_events: Vec<XidEvent>,
    /// The GPU fell off the bus during the job.
    pub lost: bool,
    /// Findings, most important first.
    pub findings: Vec<GpuFinding>,
}

/// What was found about one GPU (the GPU itself is the [`GpuSummary`] that holds the finding).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum GpuFinding {
    /// The GPU fell off the bus during the job.
    Lost,
    /// Allocated for `allocated_s`, no utilization and no process of the job ever seen on it.
    NeverUsed { allocated_s: f64 },
    /// Used at first, then idle for the last `tail_s` (from `after_s` into the job).
    IdleTail { tail_s: f64, after_s: f64 },
    /// `count` idle stretches of at least `min_s` each, `total_s` together.
    IdlePeriods {
        count: u32,
        min_s: f64,
        total_s: f64,
    },
    /// The device reports no utilization (`mig`: a MIG instance; job processes are used instead).
    UtilizationUnknown { mig: bool },
    /// Processes of another job or user ran on this GPU.
    OtherProcesses,
    /// The hardware slowed the GPU down (NVML throttle reasons, see [`THROTTLE_REASONS`]).
    HardwareThrottled { reasons: Vec<String> },
    /// Kernels ran `util_mean_pct` of the time but kept only `sm_active_mean_pct` of the SMs
    /// busy (NVML GPM).
    LowSmActivity {
        util_mean_pct: f64,
        sm_active_mean_pct: f64,
    },
    /// The node's health during the job, for its admins (not the job's doing): time held back
    /// by the power cap or a thermal limit (at least `throttle_report_min_s`), uncorrected ECC
    /// errors, XID errors with the first codes.
    NodeHealth {
        throttle_power_s: Option<f64>,
        throttle_thermal_s: Option<f64>,
        ecc_uncorrected: Option<u64>,
        xid_errors: Option<u64>,
        xid_events: Vec<XidEvent>,
    },
}

/// One GPU of a job, as advice names it: its node and its gres index (else the sampler's index).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GpuRef {
    pub node: Option<String>,
    pub index: Option<u32>,
}

impl GpuRef {
    pub fn of(g: &GpuSummary) -> Self {
        GpuRef {
            node: g.node.clone(),
            index: g.identity.gres_index.or(g.identity.index),
        }
    }
}

/// A recommendation from the job's GPUs, with the figures it rests on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum GpuAdvice {
    /// None of the `gpus` allocated GPUs was used: run on a CPU-only partition.
    CpuOnlyPartition { gpus: u32, gpu_hours_allocated: f64 },
    /// Request `keep` GPUs instead of `allocated`: `unused` were never used.
    FewerGpus {
        keep: u32,
        allocated: u32,
        unused: Vec<GpuRef>,
        gpu_hours_wasted: f64,
    },
    /// A MIG slice or a smaller GPU would do: little memory and utilization used on `gpus`.
    SmallerGpu {
        gpus: Vec<GpuRef>,
        mem_peak_bytes: u64,
        mem_total_bytes: u64,
        util_mean_pct_max: f64,
    },
    /// Release the GPUs when the GPU work is done: `gpus` sat idle for the last `idle_tail_s`.
    ReleaseWhenDone { gpus: Vec<GpuRef>, idle_tail_s: f64 },
    /// Half or more of the GPU-hours were idle: look for the reason.
    CheckIdleTime {
        gpu_hours_wasted: f64,
        gpu_hours_allocated: f64,
    },
}

/// NVML `nvmlClocksThrottleReason*` bits, named.
pub const THROTTLE_REASONS: &[(u64, &str)] = &[
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
];

/// [`summarize_gpus_with`] with default thresholds.
pub fn summarize_gpus(series: &GpuSeries, job_elapsed_s: f64) -> Vec<GpuSummary> {
    summarize_gpus_with(series, job_elapsed_s, &GpuSummaryParams::default())
}

/// One summary per device of `series` (slot order). `job_elapsed_s` is the job's run time on the
/// node (GPU-hours are charged for all of it, whatever was sampled).
pub fn summarize_gpus_with(
    series: &GpuSeries,
    job_elapsed_s: f64,
    p: &GpuSummaryParams,
) -> Vec<GpuSummary> {
    let start_ms = series.header.start_unix_ms;
    let end_ms = start_ms + (job_elapsed_s.max(0.0) * 1000.0) as u64;
    series
        .devices()
        .iter()
        .enumerate()
        .map(|(slot, id)| {
            let lost = series
                .events
                .iter()
                .any(|e| e.kind == EventKind::GpuLost && event_slot(e) == Some(slot));
            let xids: Vec<XidEvent> = series
                .events
                .iter()
                .filter(|e| e.kind == EventKind::GpuXid && event_slot(e) == Some(slot))
                .map(|e| XidEvent {
                    t_s: e.t_ms.saturating_sub(start_ms) as f64 / 1000.0,
                    code: e
                        .exit_status
                        .and_then(|c| u32::try_from(c).ok())
                        .unwrap_or(999),
                })
                .collect();
            summarize_one(
                series,
                slot as u32,
                id,
                start_ms,
                end_ms,
                job_elapsed_s,
                lost,
                xids,
                p,
            )
        })
        .collect()
}

/// One bucket's share of one device: (interval start, interval end, the device's figures), ms.
type Interval<'a> = (u64, u64, &'a DeviceBucket);

/// The summary of the device in `slot`, in phases: its intervals, then the figures of each
/// kind over them (utilization, memory and processes, power and energy, idle time), the verdicts
/// drawn from those, and last the findings.
#[allow(clippy::too_many_arguments)]
fn summarize_one(
    series: &GpuSeries,
    slot: u32,
    id: &GpuDevice,
    start_ms: u64,
    end_ms: u64,
    elapsed_s: f64,
    lost: bool,
    xid_events: Vec<XidEvent>,
    p: &GpuSummaryParams,
) -> GpuSummary {
    let points = device_intervals(series, slot);
    let util = gauge_mean_max(&points, |d| d.util_gpu_pct);
    let mem_util = gauge_mean_max(&points, |d| d.util_mem_pct);
    let job_util = gauge_mean_max(&points, |d| d.job_util_gpu_pct);
    let job_mem_util = gauge_mean_max(&points, |d| d.job_util_mem_pct);
    let flags = util_flags(&points);
    let others_active = flags.is_some_and(|f| f & UTIL_OTHERS_ACTIVE != 0);
    let power = gauge_mean_max(&points, |d| d.power_mw);
    let procs_max = gauge_max(&points, |d| d.job_processes);
    let others = gauge_max(&points, |d| d.other_processes).is_some_and(|m| m > 0) || others_active;
    let mem_total = points
        .iter()
        .rev()
        .find_map(|(_, _, d)| d.mem_total_bytes)
        .or(id.mem_total_bytes);
    let (energy_kwh, energy_estimated) = energy_kwh(&points);
    let idle = idle_timeline(&points, start_ms, p);

    let ever_busy = points
        .iter()
        .filter_map(|(_, _, d)| job_gauge(d))
        .any(|g| g.max as f64 > p.idle_util_pct);
    let ever_proc = procs_max.is_some_and(|m| m > 0);
    let never_used = idle.any_state && !ever_busy && !ever_proc;
    // Used, then idle to the end: from the last busy interval to the job's end.
    let series_end = points.last().map(|(_, to, _)| *to).unwrap_or(end_ms);
    let (idle_after_s, idle_tail_s) = match idle.last_busy_ms {
        Some(t) if ever_busy || ever_proc => {
            idle_tail(t, end_ms.max(series_end), start_ms, elapsed_s, p)
        }
        _ => (None, None),
    };
    let gpu_hours_allocated = elapsed_s.max(0.0) / 3600.0;
    let idle_share = idle.idle_share();
    let gpu_hours_wasted = if never_used {
        Some(gpu_hours_allocated)
    } else {
        idle_share.map(|s| s * gpu_hours_allocated)
    };
    // The mean that is the job's, for the classification.
    let job_mean = job_util.or(util).map(|(m, _)| m);
    // GPM figures are per mille in the spool.
    let permille = |f: fn(&DeviceBucket) -> Option<crate::spool::Gauge>| {
        gauge_mean_max(&points, f).map(|(m, _)| m / 10.0)
    };
    let sm_active = permille(|d| d.sm_active_permille);
    let sum_of = |f: fn(&DeviceBucket) -> Option<u64>| {
        points
            .iter()
            .filter_map(|(_, _, d)| f(d))
            .fold(None, |a: Option<u64>, x| {
                Some(a.unwrap_or(0).saturating_add(x))
            })
    };
    // Every XID is counted in the buckets; the events are the first few (a file whose last
    // bucket was torn off may hold an event its buckets no longer count).
    let xid_errors = sum_of(|d| d.xid_errors)
        .map(|n| n.max(xid_events.len() as u64))
        .or((!xid_events.is_empty()).then_some(xid_events.len() as u64));

    let mut g = GpuSummary {
        node: Some(series.header.node.clone()),
        slot,
        identity: id.identity.clone(),
        samples: points.iter().map(|(_, _, d)| d.samples as u64).sum(),
        util_mean_pct: util.map(|(m, _)| m),
        util_max_pct: util.map(|(_, x)| x as f64),
        mem_util_mean_pct: mem_util.map(|(m, _)| m),
        util_source: util_source(flags),
        util_coverage_share: util_coverage_share(&points),
        job_util_mean_pct: job_util.map(|(m, _)| m),
        job_util_max_pct: job_util.map(|(_, x)| x as f64),
        job_mem_util_mean_pct: job_mem_util.map(|(m, _)| m),
        utilization_unknown: util.is_none(),
        mem_peak_bytes: gauge_max(&points, |d| d.mem_used_bytes),
        mem_total_bytes: mem_total,
        job_mem_peak_bytes: gauge_max(&points, |d| d.job_mem_bytes),
        job_processes_max: procs_max,
        other_processes_seen: others,
        power_mean_w: power.map(|(m, _)| m / 1000.0),
        power_max_w: power.map(|(_, x)| x as f64 / 1000.0),
        energy_kwh,
        energy_estimated,
        idle_s: idle.any_state.then_some(idle.idle_ms as f64 / 1000.0),
        observed_s: idle.observed_ms as f64 / 1000.0,
        idle_periods: idle.periods,
        never_used,
        idle_after_s,
        idle_tail_s,
        gpu_hours_allocated,
        gpu_hours_wasted,
        classification: classify(idle.any_state, never_used, job_mean, idle_share, p).map(|c| {
            // Kernels ran most of the time, yet few SMs had work: SM activity decides.
            match sm_active {
                Some(sm) if c == GpuClass::GpuBound && sm < p.low_sm_active_pct => {
                    GpuClass::LowSmActivity
                }
                _ => c,
            }
        }),
        throttle_reasons: throttle_reasons(&points),
        sm_active_mean_pct: sm_active,
        sm_occupancy_mean_pct: permille(|d| d.sm_occupancy_permille),
        tensor_active_mean_pct: permille(|d| d.tensor_active_permille),
        dram_active_mean_pct: permille(|d| d.dram_active_permille),
        sm_clock_mean_mhz: gauge_mean_max(&points, |d| d.sm_clock_mhz).map(|(m, _)| m),
        mem_clock_mean_mhz: gauge_mean_max(&points, |d| d.mem_clock_mhz).map(|(m, _)| m),
        throttle_power_s: sum_of(|d| d.throttle_power_ms).map(|ms| ms as f64 / 1000.0),
        throttle_thermal_s: sum_of(|d| d.throttle_thermal_ms).map(|ms| ms as f64 / 1000.0),
        ecc_corrected: sum_of(|d| d.ecc_corrected),
        ecc_uncorrected: sum_of(|d| d.ecc_uncorrected),
        xid_errors,
        xid_events,
        lost,
        findings: Vec::new(),
    };
    g.findings = findings_of(&g, elapsed_s, p);
    g
}

/// The intervals of the device in `slot`, in time order: sample `i` stands for the time from the
/// previous bucket's end (any device's) to its own end.
fn device_intervals(series: &GpuSeries, slot: u32) -> Vec<Interval<'_>> {
    let mut points = Vec::new();
    let mut prev_end: Option<u64> = None;
    for b in &series.buckets {
        let from = prev_end.unwrap_or(b.t_first_ms).min(b.t_last_ms);
        prev_end = Some(b.t_last_ms);
        if let Some(d) = b.device(slot) {
            points.push((from, b.t_last_ms, d));
        }
    }
    points
}

/// Mean (over all samples, whatever the thinning) and max of one gauge; `None` when no interval
/// has it.
fn gauge_mean_max(
    points: &[Interval<'_>],
    f: fn(&DeviceBucket) -> Option<crate::spool::Gauge>,
) -> Option<(f64, u64)> {
    let gs: Vec<_> = points.iter().filter_map(|(_, _, d)| f(d)).collect();
    if gs.is_empty() {
        return None;
    }
    let (sum, count, max) = gs.iter().fold((0u128, 0u64, 0u64), |(s, c, m), g| {
        (s + g.sum as u128, c + g.count as u64, m.max(g.max))
    });
    Some((sum as f64 / count.max(1) as f64, max))
}

/// The largest value of one gauge; `None` when no interval has it.
fn gauge_max(
    points: &[Interval<'_>],
    f: fn(&DeviceBucket) -> Option<crate::spool::Gauge>,
) -> Option<u64> {
    points
        .iter()
        .filter_map(|(_, _, d)| f(d))
        .map(|g| g.max)
        .max()
}

/// The `UTIL_*` bits of all intervals together; `None` in files written before the fold.
fn util_flags(points: &[Interval<'_>]) -> Option<u64> {
    points
        .iter()
        .filter_map(|(_, _, d)| d.util_flags)
        .fold(None, |a: Option<u64>, f| Some(a.unwrap_or(0) | f))
}

/// Where the utilization figures come from, by the `UTIL_FROM_*` bits.
fn util_source(flags: Option<u64>) -> Option<GpuUtilSource> {
    flags.and_then(
        |f| match (f & UTIL_FROM_BUFFER != 0, f & UTIL_FROM_POINT_READS != 0) {
            (true, false) => Some(GpuUtilSource::DriverBuffer),
            (false, true) => Some(GpuUtilSource::PointReads),
            (true, true) => Some(GpuUtilSource::Mixed),
            (false, false) => None,
        },
    )
}

/// The buffer's time over the length of the intervals it sampled (at most 1); `None` when no
/// interval was sampled from the buffer.
fn util_coverage_share(points: &[Interval<'_>]) -> Option<f64> {
    let (covered_ms, buffered_ms) = points
        .iter()
        .filter(|(_, _, d)| d.util_flags.is_some_and(|f| f & UTIL_FROM_BUFFER != 0))
        .fold((0u64, 0u64), |(c, l), (from, to, d)| {
            (
                c.saturating_add(d.util_covered_ms.unwrap_or(0)),
                l.saturating_add(to.saturating_sub(*from)),
            )
        });
    (buffered_ms > 0).then(|| (covered_ms as f64 / buffered_ms as f64).min(1.0))
}

/// Energy in kWh and whether it is estimated: the counter's increases where the device has one,
/// else the integral of mean power over the intervals (estimated).
fn energy_kwh(points: &[Interval<'_>]) -> (Option<f64>, bool) {
    let energy_mj: Option<u64> = points
        .iter()
        .filter_map(|(_, _, d)| d.energy_mj)
        .fold(None, |a, e| Some(a.unwrap_or(0u64).saturating_add(e)));
    if let Some(mj) = energy_mj {
        return (Some(mj as f64 / 3.6e9), false);
    }
    let mut j = 0.0;
    let mut any = false;
    for (from, to, d) in points {
        if let Some(g) = d.power_mw {
            any = true;
            j += g.mean() / 1000.0 * to.saturating_sub(*from) as f64 / 1000.0;
        }
    }
    if any && j > 0.0 {
        (Some(j / 3.6e6), true)
    } else {
        (None, false)
    }
}

/// The utilization that is the job's: its own share where known (a shared GPU), else the
/// device's.
fn job_gauge(d: &DeviceBucket) -> Option<crate::spool::Gauge> {
    d.job_util_gpu_pct.or(d.util_gpu_pct)
}

/// The job's utilization per interval of device `slot`, percent, as [`idle_state`] judges it:
/// its own share on a shared GPU, else the device's; 0 where utilization is not reported but no
/// process of the job was on the device; `None` where it is not known. What the rules over a
/// running job judge (`crate::watch`).
pub fn job_util_intervals(series: &GpuSeries, slot: u32) -> Vec<(u64, u64, Option<f64>)> {
    device_intervals(series, slot)
        .into_iter()
        .map(|(from, to, d)| {
            let util = match job_gauge(d) {
                Some(g) => Some(g.mean()),
                None => d.job_processes.filter(|g| g.max == 0).map(|_| 0.0),
            };
            (from, to, util)
        })
        .collect()
}

/// Idle state of one interval: `Some(true)` idle, `Some(false)` busy, `None` unknown. Where
/// utilization is unknown (MIG), no job process on the device is idle.
fn idle_state(d: &DeviceBucket, p: &GpuSummaryParams) -> Option<bool> {
    if let Some(u) = job_gauge(d) {
        return Some(u.max as f64 <= p.idle_util_pct);
    }
    d.job_processes.map(|g| g.max == 0)
}

/// The device's idle time over its intervals.
#[derive(Debug, Default, PartialEq)]
struct IdleTimeline {
    /// Time in idle intervals.
    idle_ms: u64,
    /// Time in intervals whose state is known.
    observed_ms: u64,
    /// Stretches of consecutive idle intervals of at least `idle_min_s`.
    periods: Vec<IdlePeriod>,
    /// End of the last busy interval.
    last_busy_ms: Option<u64>,
    /// Some interval's state was known.
    any_state: bool,
}

impl IdleTimeline {
    fn idle_share(&self) -> Option<f64> {
        (self.observed_ms > 0).then(|| self.idle_ms as f64 / self.observed_ms as f64)
    }
}

/// Walks the intervals: idle and observed time, idle stretches (an interval of unknown state
/// ends one, as a busy one does), the last busy moment.
fn idle_timeline(points: &[Interval<'_>], start_ms: u64, p: &GpuSummaryParams) -> IdleTimeline {
    let rel = |t: u64| t.saturating_sub(start_ms) as f64 / 1000.0;
    let mut out = IdleTimeline::default();
    let mut run: Option<(u64, u64)> = None;
    let close = |run: &mut Option<(u64, u64)>, periods: &mut Vec<IdlePeriod>| {
        if let Some((a, b)) = run.take() {
            // Saturating: times come from disk (decoding already refuses them out of order).
            let d = b.saturating_sub(a) as f64 / 1000.0;
            if d >= p.idle_min_s {
                periods.push(IdlePeriod {
                    start_s: rel(a),
                    end_s: rel(b),
                    duration_s: d,
                });
            }
        }
    };
    for (from, to, d) in points {
        match idle_state(d, p) {
            Some(true) => {
                out.any_state = true;
                out.idle_ms = out.idle_ms.saturating_add(to.saturating_sub(*from));
                out.observed_ms = out.observed_ms.saturating_add(to.saturating_sub(*from));
                run = Some(match run {
                    Some((a, _)) => (a, *to),
                    None => (*from, *to),
                });
            }
            Some(false) => {
                out.any_state = true;
                out.observed_ms = out.observed_ms.saturating_add(to.saturating_sub(*from));
                out.last_busy_ms = Some(*to);
                close(&mut run, &mut out.periods);
            }
            None => close(&mut run, &mut out.periods),
        }
    }
    close(&mut run, &mut out.periods);
    out
}

/// `(idle_after_s, idle_tail_s)` of a device last busy at `last_busy_ms` and allocated until
/// `end_ms`: both `None` unless the tail is long enough, in seconds and as a share of the job.
fn idle_tail(
    last_busy_ms: u64,
    end_ms: u64,
    start_ms: u64,
    elapsed_s: f64,
    p: &GpuSummaryParams,
) -> (Option<f64>, Option<f64>) {
    let tail = end_ms.saturating_sub(last_busy_ms) as f64 / 1000.0;
    if tail >= p.tail_idle_min_s && tail >= p.tail_idle_min_share * elapsed_s {
        let after = last_busy_ms.saturating_sub(start_ms) as f64 / 1000.0;
        (Some(after), Some(tail))
    } else {
        (None, None)
    }
}

/// The device's class: `None` when no interval's state is known.
fn classify(
    any_state: bool,
    never_used: bool,
    job_mean: Option<f64>,
    idle_share: Option<f64>,
    p: &GpuSummaryParams,
) -> Option<GpuClass> {
    if !any_state {
        None
    } else if never_used
        || job_mean.is_some_and(|m| m < p.idle_class_util_pct)
        || idle_share.is_some_and(|s| s >= 0.8)
    {
        Some(GpuClass::GpuIdle)
    } else if job_mean.is_some_and(|m| m >= p.bound_util_pct) {
        Some(GpuClass::GpuBound)
    } else {
        Some(GpuClass::Mixed)
    }
}

/// The names of the throttle reasons seen in any interval ([`THROTTLE_REASONS`] order).
fn throttle_reasons(points: &[Interval<'_>]) -> Vec<String> {
    let bits = points
        .iter()
        .filter_map(|(_, _, d)| d.throttle_reasons)
        .fold(0u64, |a, b| a | b);
    THROTTLE_REASONS
        .iter()
        .filter(|(bit, _)| bits & bit != 0)
        .map(|(_, n)| n.to_string())
        .collect()
}

/// The findings of a summarized GPU (its `findings` aside), most important first.
fn findings_of(g: &GpuSummary, elapsed_s: f64, p: &GpuSummaryParams) -> Vec<GpuFinding> {
    let mut findings = Vec::new();
    if g.lost {
        findings.push(GpuFinding::Lost);
    }
    if g.never_used {
        findings.push(GpuFinding::NeverUsed {
            allocated_s: elapsed_s.max(0.0),
        });
    } else if let (Some(after), Some(tail)) = (g.idle_after_s, g.idle_tail_s) {
        findings.push(GpuFinding::IdleTail {
            tail_s: tail,
            after_s: after,
        });
    }
    if !g.never_used && !g.idle_periods.is_empty() {
        findings.push(GpuFinding::IdlePeriods {
            count: g.idle_periods.len() as u32,
            min_s: p.idle_min_s,
            total_s: g.idle_periods.iter().map(|x| x.duration_s).sum(),
        });
    }
    if g.utilization_unknown && g.samples > 0 {
        findings.push(GpuFinding::UtilizationUnknown {
            mig: g.identity.kind == Some(GpuKind::Mig),
        });
    }
    if g.other_processes_seen {
        findings.push(GpuFinding::OtherProcesses);
    }
    if g.throttle_reasons
        .iter()
        .any(|r| r.contains("thermal") || r == "hw_slowdown" || r.contains("brake"))
    {
        findings.push(GpuFinding::HardwareThrottled {
            reasons: g.throttle_reasons.clone(),
        });
    }
    if g.classification == Some(GpuClass::LowSmActivity) {
        if let (Some(u), Some(sm)) = (
            g.job_util_mean_pct.or(g.util_mean_pct),
            g.sm_active_mean_pct,
        ) {
            findings.push(GpuFinding::LowSmActivity {
                util_mean_pct: u,
                sm_active_mean_pct: sm,
            });
        }
    }
    let long = |t: Option<f64>| t.filter(|t| *t >= p.throttle_report_min_s);
    let (power, thermal) = (long(g.throttle_power_s), long(g.throttle_thermal_s));
    let ecc = g.ecc_uncorrected.filter(|n| *n > 0);
    let xid = g.xid_errors.filter(|n| *n > 0);
    if power.is_some() || thermal.is_some() || ecc.is_some() || xid.is_some() {
        findings.push(GpuFinding::NodeHealth {
            throttle_power_s: power,
            throttle_thermal_s: thermal,
            ecc_uncorrected: ecc,
            xid_errors: xid,
            xid_events: g.xid_events.clone(),
        });
    }
    findings
}

/// Data-quality notes of a GPU series (unresolved GPUs, no driver, torn file, no end record).
pub fn gpu_quality_notes(series: &GpuSeries) -> Vec<String> {
    let mut v = Vec::new();
    if let Some(i) = &series.info {
        v.extend(i.notes.iter().cloned());
        for u in &i.unresolved {
            v.push(format!(
                "GPU {u} of the job was not found on the node: not sampled"
            ));
        }
    } else {
        v.push("the GPU monitor stopped before it identified the GPUs".to_string());
    }
    if series.torn {
        v.push("a torn GPU spool record was dropped".to_string());
    }
    // Utilization that is not interval data, or interval data with holes, said per device.
    for (slot, id) in series.devices().iter().enumerate() {
        let mut flags = 0u64;
        let (mut covered_ms, mut buffered_ms) = (0u64, 0u64);
        let mut prev_end: Option<u64> = None;
        for b in &series.buckets {
            let from = prev_end.unwrap_or(b.t_first_ms).min(b.t_last_ms);
            prev_end = Some(b.t_last_ms);
            let Some(d) = b.device(slot as u32) else {
                continue;
            };
            let f = d.util_flags.unwrap_or(0);
            flags |= f;
            if f & UTIL_FROM_BUFFER != 0 {
                covered_ms = covered_ms.saturating_add(d.util_covered_ms.unwrap_or(0));
                buffered_ms = buffered_ms.saturating_add(b.t_last_ms.saturating_sub(from));
            }
        }
        if flags & UTIL_FROM_POINT_READS != 0 {
            v.push(format!(
                "{}: utilization is from point reads{} (the driver keeps no sample buffer for it): \
                 bursts between reads can be missed",
                id.identity.label(),
                if flags & UTIL_FROM_BUFFER != 0 {
                    " for part of the job"
                } else {
                    ""
                }
            ));
        }
        // Below 90 %: the monitor's drains fell behind the buffer (a slow driver).
        if buffered_ms > 0 && (covered_ms as f64) < 0.9 * buffered_ms as f64 {
            v.push(format!(
                "{}: the driver's utilization samples cover {:.0} % of the time (some were \
                 overwritten before they were read)",
                id.identity.label(),
                100.0 * covered_ms as f64 / buffered_ms as f64
            ));
        }
    }
    if series.end.is_none() {
        v.push("the GPU monitor did not write its end record".to_string());
    }
    for e in &series.events {
        if e.kind == EventKind::NvmlGaveUp || e.kind == EventKind::NvmlTimeout {
            if let Some(m) = &e.message {
                v.push(m.clone());
            }
        }
    }
    v.dedup();
    v
}

/// Advice from the GPUs of a job (all nodes' summaries together).
pub fn gpu_advice(gpus: &[GpuSummary]) -> Vec<GpuAdvice> {
    gpu_advice_with(gpus, &GpuSummaryParams::default())
}

pub fn gpu_advice_with(gpus: &[GpuSummary], p: &GpuSummaryParams) -> Vec<GpuAdvice> {
    let mut out = Vec::new();
    if gpus.is_empty() {
        return out;
    }
    let n = gpus.len() as u32;
    let unused: Vec<&GpuSummary> = gpus.iter().filter(|g| g.never_used).collect();
    let wasted: f64 = gpus.iter().filter_map(|g| g.gpu_hours_wasted).sum();
    let refs = |v: &[&GpuSummary]| v.iter().map(|g| GpuRef::of(g)).collect::<Vec<_>>();
    if unused.len() as u32 == n {
        out.push(GpuAdvice::CpuOnlyPartition {
            gpus: n,
            gpu_hours_allocated: gpus.iter().map(|g| g.gpu_hours_allocated).sum(),
        });
        return out;
    }
    if !unused.is_empty() {
        out.push(GpuAdvice::FewerGpus {
            keep: n.saturating_sub(unused.len() as u32),
            allocated: n,
            unused: refs(&unused),
            gpu_hours_wasted: unused.iter().filter_map(|g| g.gpu_hours_wasted).sum(),
        });
    }
    let small: Vec<&GpuSummary> = gpus
        .iter()
        .filter(|g| !g.never_used && g.identity.kind != Some(GpuKind::Mig))
        .filter(
            |g| match (g.mem_peak_bytes, g.mem_total_bytes, g.util_mean_pct) {
                (Some(peak), Some(total), Some(u)) => {
                    total > 0
                        && (peak as f64) <= p.small_mem_share * total as f64
                        && u < p.low_util_pct
                }
                _ => false,
            },
        )
        .collect();
    if !small.is_empty() {
        out.push(GpuAdvice::SmallerGpu {
            gpus: refs(&small),
            mem_peak_bytes: small
                .iter()
                .filter_map(|g| g.mem_peak_bytes)
                .max()
                .unwrap_or(0),
            mem_total_bytes: small
                .iter()
                .filter_map(|g| g.mem_total_bytes)
                .max()
                .unwrap_or(0),
            util_mean_pct_max: small
                .iter()
                .filter_map(|g| g.util_mean_pct)
                .fold(0.0, f64::max),
        });
    }
    let tails: Vec<&GpuSummary> = gpus.iter().filter(|g| g.idle_tail_s.is_some()).collect();
    if !tails.is_empty() {
        out.push(GpuAdvice::ReleaseWhenDone {
            gpus: refs(&tails),
            idle_tail_s: tails
                .iter()
                .filter_map(|g| g.idle_tail_s)
                .fold(0.0, f64::max),
        });
    }
    if out.is_empty() && wasted >= 1.0 {
        let alloc: f64 = gpus.iter().map(|g| g.gpu_hours_allocated).sum();
        if alloc > 0.0 && wasted / alloc >= 0.5 {
            out.push(GpuAdvice::CheckIdleTime {
                gpu_hours_wasted: wasted,
                gpu_hours_allocated: alloc,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::spool::{thin, GpuBucket, GpuInfo};
    use crate::spool::{Event, Gauge, Header};

    const GIB: u64 = 1 << 30;
    const T0: u64 = 1_800_000_000_000;

    fn header() -> Header {
        Header {
            uid: 1,
            gid: 1,
            cadence_s: 60,
            plugin_version: "t".into(),
            ..Header::new(9, "gpu01", "gpu", T0)
        }
    }

    fn nv(i: u32) -> GpuDevice {
        GpuDevice {
            identity: GpuIdentity {
                kind: Some(GpuKind::Nvidia),
                index: Some(i),
                gres_index: Some(i),
                minor: Some(i),
                uuid: Some(format!("GPU-{i:08}")),
                name: Some("NVIDIA A100-SXM4-80GB".into()),
                ..Default::default()
            },
            mem_total_bytes: Some(80 * GIB),
        }
    }

    /// One reading of one device: (util %, memory used, job processes, power mW, energy delta mJ).
    type R = (Option<u64>, u64, Option<u64>, u64, Option<u64>);

    fn dev(slot: u32, r: R) -> DeviceBucket {
        DeviceBucket {
            slot,
            samples: 1,
            util_gpu_pct: r.0.map(Gauge::one),
            mem_used_bytes: Some(Gauge::one(r.1)),
            job_processes: r.2.map(Gauge::one),
            job_mem_bytes: r.2.map(|p| Gauge::one(p * r.1 / 2)),
            other_processes: Some(Gauge::one(0)),
            power_mw: Some(Gauge::one(r.3)),
            energy_mj: r.4,
            mem_total_bytes: Some(80 * GIB),
            ..Default::default()
        }
    }

    /// `minutes + 1` samples at one per minute; `f(minute)` gives each device's reading.
    fn series(devs: Vec<GpuDevice>, minutes: u64, f: impl Fn(u64) -> Vec<R>) -> GpuSeries {
        let buckets = (0..=minutes)
            .map(|m| GpuBucket {
                t_first_ms: T0 + m * 60_000,
                t_last_ms: T0 + m * 60_000,
                n: 1,
                devices: f(m)
                    .into_iter()
                    .enumerate()
                    .map(|(i, r)| dev(i as u32, r))
                    .collect(),
            })
            .collect();
        GpuSeries {
            header: header(),
            info: Some(GpuInfo {
                devices: devs,
                ..Default::default()
            }),
            buckets,
            events: vec![],
            end: None,
            torn: false,
            valid_bytes: 0,
        }
    }

    /// Two GPUs busy by `utilization.gpu` (90 %) for an hour; GPU 0 with SM activity `sm0` per
    /// mille on every sample, GPU 1 with none; GPU 0 throttled `power_ms` per sample.
    fn sm_series(sm0: u64, power_ms: u64) -> GpuSeries {
        let mut s = series(vec![nv(0), nv(1)], 60, |_| {
            vec![
                (Some(90), 10 * GIB, Some(1), 300_000, Some(1)),
                (Some(90), 10 * GIB, Some(1), 300_000, Some(1)),
            ]
        });
        for b in &mut s.buckets {
            let d = &mut b.devices[0];
            d.sm_active_permille = Some(Gauge::one(sm0));
            d.throttle_power_ms = Some(power_ms);
            d.xid_errors = Some(0);
        }
        s
    }

    /// SM activity decides between "GPU-bound" and "low SM activity" where GPM gave it; a GPU
    /// without it keeps its class from kernel time, its SM figure `None`.
    #[test]
    fn low_sm_activity_replaces_gpu_bound_only_below_the_threshold_and_only_with_gpm() {
        let p = GpuSummaryParams::default();
        let low = summarize_gpus_with(&sm_series(60, 0), 3600.0, &p);
        assert_eq!(low[0].sm_active_mean_pct, Some(6.0));
        assert_eq!(low[0].classification, Some(GpuClass::LowSmActivity));
        assert!(low[0].findings.contains(&GpuFinding::LowSmActivity {
            util_mean_pct: 90.0,
            sm_active_mean_pct: 6.0
        }));
        assert_eq!(low[1].sm_active_mean_pct, None);
        assert_eq!(low[1].classification, Some(GpuClass::GpuBound));
        let busy = summarize_gpus_with(&sm_series(800, 0), 3600.0, &p);
        assert_eq!(busy[0].classification, Some(GpuClass::GpuBound));
        assert!(!busy[0]
            .findings
            .iter()
            .any(|f| matches!(f, GpuFinding::LowSmActivity { .. })));
        // The threshold is the parameter's: at 5 % nothing is low.
        let strict = GpuSummaryParams {
            low_sm_active_pct: 5.0,
            ..Default::default()
        };
        let at5 = summarize_gpus_with(&sm_series(60, 0), 3600.0, &strict);
        assert_eq!(at5[0].classification, Some(GpuClass::GpuBound));
    }

    /// Throttle time is summed over the buckets and reported to the admins from
    /// `throttle_report_min_s` on; measured zero XIDs are 0 and no finding; XID events are read
    /// with their codes and times.
    #[test]
    fn node_health_sums_throttle_time_and_reports_it_from_the_threshold() {
        let p = GpuSummaryParams::default();
        // 61 samples × 500 ms = 30.5 s: under the 60 s threshold.
        let short = summarize_gpus_with(&sm_series(600, 500), 3600.0, &p);
        assert_eq!(short[0].throttle_power_s, Some(30.5));
        assert_eq!(short[0].xid_errors, Some(0));
        assert_eq!(short[1].throttle_power_s, None);
        assert!(!short[0]
            .findings
            .iter()
            .any(|f| matches!(f, GpuFinding::NodeHealth { .. })));
        let mut long = sm_series(600, 12_000);
        long.events.push(Event {
            t_ms: T0 + 90_000,
            kind: EventKind::GpuXid,
            step: Some("gpu0".into()),
            job: None,
            step_reading: None,
            exit_status: Some(79),
            message: Some("GPU 0: XID 79".into()),
        });
        long.buckets[2].devices[0].xid_errors = Some(1);
        let g = &summarize_gpus_with(&long, 3600.0, &p)[0];
        assert_eq!(g.throttle_power_s, Some(732.0));
        assert_eq!(g.xid_errors, Some(1));
        assert_eq!(
            g.xid_events,
            vec![XidEvent {
                t_s: 90.0,
                code: 79
            }]
        );
        assert!(g.findings.contains(&GpuFinding::NodeHealth {
            throttle_power_s: Some(732.0),
            throttle_thermal_s: None,
            ecc_uncorrected: None,
            xid_errors: Some(1),
            xid_events: vec![XidEvent {
                t_s: 90.0,
                code: 79
            }],
        }));
    }

    /// 4 h job, 3 GPUs: 0 busy throughout, 1 never used, 2 busy for the first hour only.
    fn three_gpus() -> GpuSeries {
        series(vec![nv(0), nv(1), nv(2)], 240, |m| {
            vec![
                (Some(90), 60 * GIB, Some(1), 350_000, Some(21_000_000)),
                (Some(0), 0, Some(0), 60_000, Some(3_600_000)),
                if m <= 60 {
                    (Some(80), 40 * GIB, Some(1), 300_000, Some(18_000_000))
                } else {
                    (Some(0), 40 * GIB, Some(1), 70_000, Some(4_200_000))
                },
            ]
        })
    }

    #[test]
    fn busy_gpu_is_gpu_bound_without_findings() {
        let s = summarize_gpus(&three_gpus(), 4.0 * 3600.0);
        let g = &s[0];
        assert_eq!(g.classification, Some(GpuClass::GpuBound));
        assert_eq!(g.util_mean_pct, Some(90.0));
        assert_eq!(g.util_max_pct, Some(90.0));
        assert_eq!(g.mem_peak_bytes, Some(60 * GIB));
        assert_eq!(g.samples, 241);
        assert!(!g.never_used && g.idle_after_s.is_none());
        assert_eq!(g.gpu_hours_allocated, 4.0);
        assert_eq!(g.gpu_hours_wasted, Some(0.0));
        assert!(g.findings.is_empty(), "{:?}", g.findings);
        // 241 samples × 21 MJ... 21_000_000 mJ = 21 kJ per minute, the first sample included.
        let kwh = g.energy_kwh.unwrap();
        assert!((kwh - 241.0 * 21_000.0 / 3.6e6).abs() < 1e-9, "{kwh}");
        assert!(!g.energy_estimated);
        assert_eq!(g.power_mean_w, Some(350.0));
    }

    #[test]
    fn never_used_gpu_is_named_and_all_its_hours_wasted() {
        let s = summarize_gpus(&three_gpus(), 4.0 * 3600.0);
        let g = &s[1];
        assert!(g.never_used);
        assert_eq!(g.classification, Some(GpuClass::GpuIdle));
        assert_eq!(g.gpu_hours_wasted, Some(4.0));
        assert_eq!(
            g.findings,
            vec![GpuFinding::NeverUsed {
                allocated_s: 4.0 * 3600.0
            }]
        );
        assert!(g.idle_periods.len() == 1 && g.idle_periods[0].duration_s == 4.0 * 3600.0);
    }

    #[test]
    fn used_then_idle_is_found_with_its_hours() {
        let s = summarize_gpus(&three_gpus(), 4.0 * 3600.0);
        let g = &s[2];
        assert!(!g.never_used);
        assert_eq!(g.idle_after_s, Some(3600.0));
        assert_eq!(g.idle_tail_s, Some(3.0 * 3600.0));
        assert_eq!(
            g.findings[0],
            GpuFinding::IdleTail {
                tail_s: 3.0 * 3600.0,
                after_s: 3600.0
            }
        );
        assert_eq!(g.gpu_hours_wasted, Some(3.0), "idle 3 of 4 observed hours");
        assert_eq!(g.classification, Some(GpuClass::Mixed));
        assert_eq!(g.idle_periods.len(), 1);
        assert_eq!(g.idle_periods[0].start_s, 3600.0);
    }

    #[test]
    fn advice_names_unused_gpus_and_idle_tail() {
        let s = summarize_gpus(&three_gpus(), 4.0 * 3600.0);
        let a = gpu_advice(&s);
        let gpu = |i| GpuRef {
            node: Some("gpu01".into()),
            index: Some(i),
        };
        assert_eq!(
            a[0],
            GpuAdvice::FewerGpus {
                keep: 2,
                allocated: 3,
                unused: vec![gpu(1)],
                gpu_hours_wasted: 4.0
            }
        );
        assert!(a.contains(&GpuAdvice::ReleaseWhenDone {
            gpus: vec![gpu(2)],
            idle_tail_s: 3.0 * 3600.0
        }));
        assert!(!a
            .iter()
            .any(|x| matches!(x, GpuAdvice::CpuOnlyPartition { .. })));
    }

    #[test]
    fn nothing_used_means_cpu_partition() {
        let s = series(vec![nv(0), nv(1)], 60, |_| {
            vec![(Some(0), 0, Some(0), 50_000, None); 2]
        });
        let sums = summarize_gpus(&s, 3600.0);
        assert!(sums.iter().all(|g| g.never_used));
        assert!(sums[0].energy_estimated, "no counter: integrated power");
        let kwh = sums[0].energy_kwh.unwrap();
        assert!((kwh - 0.05).abs() < 1e-9, "50 W for 1 h: {kwh}");
        let a = gpu_advice(&sums);
        assert_eq!(a.len(), 1);
        assert!(
            matches!(a[0], GpuAdvice::CpuOnlyPartition { gpus: 2, gpu_hours_allocated } if (gpu_hours_allocated - 2.0).abs() < 1e-9),
            "{:?}",
            a[0]
        );
    }

    #[test]
    fn small_memory_and_low_utilization_suggests_mig_or_smaller_gpu() {
        let s = series(vec![nv(0)], 120, |m| {
            vec![(
                Some(if m % 2 == 0 { 30 } else { 10 }),
                4 * GIB,
                Some(1),
                90_000,
                None,
            )]
        });
        let sums = summarize_gpus(&s, 7200.0);
        assert_eq!(sums[0].util_mean_pct.map(|u| u.round()), Some(20.0));
        let a = gpu_advice(&sums);
        assert!(
            matches!(&a[0], GpuAdvice::SmallerGpu { mem_peak_bytes, mem_total_bytes, util_mean_pct_max, .. }
                if *mem_peak_bytes == 4 * GIB && *mem_total_bytes == 80 * GIB && util_mean_pct_max.round() == 20.0),
            "{:?}",
            a[0]
        );
        // A well-used GPU gets no advice.
        assert!(gpu_advice(&summarize_gpus(&three_gpus(), 14_400.0)[..1]).is_empty());
    }

    #[test]
    fn mig_without_utilization_uses_job_processes() {
        let mut id = nv(0);
        id.identity.kind = Some(GpuKind::Mig);
        let s = series(vec![id], 120, |m| {
            vec![(None, GIB, Some(if m <= 60 { 1 } else { 0 }), 0, None)]
        });
        let g = &summarize_gpus(&s, 7200.0)[0];
        assert!(g.utilization_unknown);
        assert_eq!(g.util_mean_pct, None);
        assert!(!g.never_used);
        assert_eq!(g.idle_after_s, Some(3600.0));
        assert!(g
            .findings
            .contains(&GpuFinding::UtilizationUnknown { mig: true }));
        // No utilization and no process info at all: nothing can be concluded.
        let s = series(vec![nv(0)], 10, |_| vec![(None, GIB, None, 0, None)]);
        let g = &summarize_gpus(&s, 600.0)[0];
        assert!(!g.never_used);
        assert_eq!((g.classification, g.gpu_hours_wasted), (None, None));
    }

    #[test]
    fn idle_periods_in_the_middle_and_short_dips_ignored() {
        let s = series(vec![nv(0)], 180, |m| {
            let u = if (60..90).contains(&m) || m == 150 {
                0
            } else {
                75
            };
            vec![(Some(u), GIB, Some(1), 0, None)]
        });
        let g = &summarize_gpus(&s, 3.0 * 3600.0)[0];
        assert_eq!(g.idle_periods.len(), 1, "{:?}", g.idle_periods);
        assert_eq!(g.idle_periods[0].start_s, 59.0 * 60.0);
        assert_eq!(g.idle_periods[0].duration_s, 30.0 * 60.0);
        assert_eq!(g.idle_s, Some(31.0 * 60.0));
        assert!(g.idle_after_s.is_none());
    }

    #[test]
    fn thinned_series_keeps_the_findings() {
        let mut s = three_gpus();
        s.buckets = thin(&s.buckets, 16);
        let sums = summarize_gpus(&s, 4.0 * 3600.0);
        assert!(sums[1].never_used);
        assert_eq!(sums[0].util_max_pct, Some(90.0));
        assert_eq!(sums[0].samples, 241);
        let t = sums[2].idle_after_s.unwrap();
        assert!((3600.0..=4800.0).contains(&t), "{t}");
    }

    /// A GPU whose buffer stopped answering mid-job: its source is `mixed`, the note says point
    /// reads "for part of the job", and the buffered intervals count one value per 200 ms sample.
    #[test]
    fn buffer_then_point_reads_is_mixed_and_noted() {
        use crate::gpu::fold::{UTIL_FROM_BUFFER, UTIL_FROM_POINT_READS};
        let mut s = series(vec![nv(0)], 2, |_| vec![(Some(0), GIB, Some(1), 0, None)]);
        // Minute 1: 300 driver samples, mean 40 %, fully covered; minute 2: one point read of 0.
        let d = &mut s.buckets[1].devices[0];
        d.util_gpu_pct = Some(Gauge {
            min: 0,
            max: 100,
            sum: 300 * 40,
            count: 300,
        });
        d.util_flags = Some(UTIL_FROM_BUFFER);
        d.util_covered_ms = Some(60_000);
        s.buckets[2].devices[0].util_flags = Some(UTIL_FROM_POINT_READS);
        let g = &summarize_gpus(&s, 120.0)[0];
        assert_eq!(g.util_source, Some(GpuUtilSource::Mixed));
        assert_eq!(g.util_coverage_share, Some(1.0));
        // Weighted by samples: (300 × 40 + 0 + 0) / 302.
        let m = g.util_mean_pct.unwrap();
        assert!((m - 12_000.0 / 302.0).abs() < 1e-9, "{m}");
        let notes = gpu_quality_notes(&s);
        assert!(
            notes
                .iter()
                .any(|n| n.contains("point reads for part of the job")),
            "{notes:?}"
        );
        assert!(!notes.iter().any(|n| n.contains("cover")), "{notes:?}");
    }

    #[test]
    fn lost_gpu_throttling_and_json() {
        let mut s = three_gpus();
        s.events.push(Event {
            t_ms: T0 + 100,
            kind: EventKind::GpuLost,
            step: Some("gpu0".into()),
            job: None,
            step_reading: None,
            exit_status: None,
            message: Some("lost".into()),
        });
        s.buckets[3].devices[0].throttle_reasons = Some(0x4 | 0x40);
        let sums = summarize_gpus(&s, 4.0 * 3600.0);
        assert!(sums[0].lost && !sums[1].lost);
        assert_eq!(
            sums[0].throttle_reasons,
            vec!["sw_power_cap", "hw_thermal_slowdown"]
        );
        assert!(sums[0].findings.contains(&GpuFinding::HardwareThrottled {
            reasons: vec!["sw_power_cap".into(), "hw_thermal_slowdown".into()]
        }));
        assert!(sums[0].findings.contains(&GpuFinding::Lost));
        let json = serde_json::to_string(&sums).unwrap();
        assert!(json.contains("\"gpu_hours_wasted\":4.0"), "{json}");
        assert!(json.contains("\"classification\":\"gpu_bound\""));
        let back: Vec<GpuSummary> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, sums);
        let notes = gpu_quality_notes(&s);
        assert!(notes.iter().any(|n| n.contains("end record")));
    }

    // The phases of `summarize_one`, one by one.

    /// A bucket of one device with only the given utilization (job's share unknown), job
    /// processes and power.
    fn bucket(util: Option<u64>, procs: Option<u64>, power_mw: Option<u64>) -> DeviceBucket {
        DeviceBucket {
            samples: 1,
            util_gpu_pct: util.map(Gauge::one),
            job_processes: procs.map(Gauge::one),
            power_mw: power_mw.map(Gauge::one),
            ..Default::default()
        }
    }

    #[test]
    fn intervals_run_from_the_previous_bucket_end_of_any_device() {
        let mut s = series(vec![nv(0), nv(1)], 2, |_| {
            vec![(Some(1), 0, None, 0, None); 2]
        });
        // Minute 1 has no reading of device 1: its interval at minute 2 starts at minute 1.
        s.buckets[1].devices.retain(|d| d.slot == 0);
        let spans = |slot| -> Vec<(u64, u64)> {
            device_intervals(&s, slot)
                .iter()
                .map(|(a, b, _)| ((a - T0) / 1000, (b - T0) / 1000))
                .collect()
        };
        assert_eq!(spans(0), [(0, 0), (0, 60), (60, 120)]);
        assert_eq!(spans(1), [(0, 0), (60, 120)]);
    }

    #[test]
    fn idle_timeline_splits_stretches_at_busy_and_unknown_intervals() {
        let p = GpuSummaryParams {
            idle_min_s: 120.0,
            ..Default::default()
        };
        let idle = bucket(Some(0), None, None);
        let busy = bucket(Some(50), None, None);
        let unknown = bucket(None, None, None);
        let mig_idle = bucket(None, Some(0), None);
        // Minutes: 0-3 idle (the last one by "no job process"), 3-4 busy, 4-5 idle, 5-6 unknown,
        // 6-7 idle.
        let b = [&idle, &idle, &mig_idle, &busy, &idle, &unknown, &idle];
        let points: Vec<Interval<'_>> = b
            .iter()
            .enumerate()
            .map(|(i, d)| (T0 + i as u64 * 60_000, T0 + (i as u64 + 1) * 60_000, *d))
            .collect();
        let t = idle_timeline(&points, T0, &p);
        assert_eq!(t.idle_ms, 5 * 60_000);
        assert_eq!(
            t.observed_ms,
            6 * 60_000,
            "the unknown minute is not observed"
        );
        assert_eq!(t.last_busy_ms, Some(T0 + 4 * 60_000));
        assert!(t.any_state);
        // Only the first stretch (3 min) reaches 2 min; the 1-min ones are too short.
        assert_eq!(
            t.periods,
            [IdlePeriod {
                start_s: 0.0,
                end_s: 180.0,
                duration_s: 180.0
            }]
        );
        assert_eq!(t.idle_share(), Some(5.0 / 6.0));
        let none = idle_timeline(&points[5..6], T0, &p);
        assert!(!none.any_state);
        assert_eq!(none.idle_share(), None);
    }

    #[test]
    fn energy_takes_the_counter_else_integrates_power() {
        let mut a = bucket(None, None, Some(200_000)); // 200 W
        let b = bucket(None, None, Some(400_000)); // 400 W
        fn minute(d: &DeviceBucket) -> Interval<'_> {
            (0, 60_000, d)
        }
        // No counter: 200 W and 400 W for a minute each = 36 kJ = 0.01 kWh, estimated.
        let (kwh, estimated) = energy_kwh(&[minute(&a), minute(&b)]);
        assert!(estimated);
        assert!((kwh.unwrap() - 0.01).abs() < 1e-12, "{kwh:?}");
        // A counter wins over power: 3.6e9 mJ = 1 kWh, measured.
        a.energy_mj = Some(3_600_000_000);
        assert_eq!(energy_kwh(&[minute(&a), minute(&b)]), (Some(1.0), false));
        assert_eq!(
            energy_kwh(&[minute(&bucket(None, None, None))]),
            (None, false)
        );
    }

    #[test]
    fn util_source_and_coverage_from_the_flags() {
        assert_eq!(util_source(None), None);
        assert_eq!(util_source(Some(0)), None);
        assert_eq!(
            util_source(Some(UTIL_FROM_BUFFER)),
            Some(GpuUtilSource::DriverBuffer)
        );
        assert_eq!(
            util_source(Some(UTIL_FROM_POINT_READS | UTIL_OTHERS_ACTIVE)),
            Some(GpuUtilSource::PointReads)
        );
        assert_eq!(
            util_source(Some(UTIL_FROM_BUFFER | UTIL_FROM_POINT_READS)),
            Some(GpuUtilSource::Mixed)
        );
        let with = |flags, covered_ms| DeviceBucket {
            util_flags: Some(flags),
            util_covered_ms: Some(covered_ms),
            ..Default::default()
        };
        let (buf, reads) = (
            with(UTIL_FROM_BUFFER, 30_000),
            with(UTIL_FROM_POINT_READS, 0),
        );
        // Half of the buffered minute covered; the point-read minute does not count.
        let points = [(0, 60_000, &buf), (60_000, 120_000, &reads)];
        assert_eq!(util_coverage_share(&points), Some(0.5));
        assert_eq!(
            util_flags(&points),
            Some(UTIL_FROM_BUFFER | UTIL_FROM_POINT_READS)
        );
        assert_eq!(util_coverage_share(&points[1..]), None);
    }

    #[test]
    fn idle_tail_needs_its_length_and_its_share_of_the_job() {
        let p = GpuSummaryParams::default(); // 1800 s and 20 % of the job
        let s = 1000;
        // Busy until 600 s into a 3600 s job: 3000 s idle at the end.
        assert_eq!(
            idle_tail(T0 + 600 * s, T0 + 3600 * s, T0, 3600.0, &p),
            (Some(600.0), Some(3000.0))
        );
        // 1000 s is under 1800 s.
        assert_eq!(
            idle_tail(T0 + 2600 * s, T0 + 3600 * s, T0, 3600.0, &p),
            (None, None)
        );
        // 2000 s of a 20000 s job is 10 %.
        assert_eq!(
            idle_tail(T0 + 18000 * s, T0 + 20000 * s, T0, 20000.0, &p),
            (None, None)
        );
    }

    #[test]
    fn classification_by_use_mean_and_idle_share() {
        let p = GpuSummaryParams::default(); // bound from 70 %, idle under 10 %
        assert_eq!(classify(false, false, Some(90.0), None, &p), None);
        assert_eq!(
            classify(true, true, None, None, &p),
            Some(GpuClass::GpuIdle)
        );
        assert_eq!(
            classify(true, false, Some(5.0), Some(0.0), &p),
            Some(GpuClass::GpuIdle)
        );
        assert_eq!(
            classify(true, false, Some(90.0), Some(0.8), &p),
            Some(GpuClass::GpuIdle),
            "idle 80 % of the time"
        );
        assert_eq!(
            classify(true, false, Some(90.0), Some(0.1), &p),
            Some(GpuClass::GpuBound)
        );
        assert_eq!(
            classify(true, false, Some(40.0), Some(0.1), &p),
            Some(GpuClass::Mixed)
        );
    }

    #[test]
    fn throttle_reasons_are_named_in_table_order() {
        let a = DeviceBucket {
            throttle_reasons: Some(0x40),
            ..Default::default()
        };
        let b = DeviceBucket {
            throttle_reasons: Some(0x4 | 0x1),
            ..Default::default()
        };
        assert_eq!(
            throttle_reasons(&[(0, 1, &a), (1, 2, &b)]),
            ["sw_power_cap", "hw_thermal_slowdown"]
        );
    }

    #[test]
    fn findings_in_order_of_importance() {
        let p = GpuSummaryParams::default();
        let s = series(vec![nv(0)], 2, |_| {
            vec![(Some(90), GIB, Some(1), 300_000, None)]
        });
        let mut g = summarize_gpus_with(&s, 120.0, &p).remove(0);
        assert_eq!(findings_of(&g, 120.0, &p), []);
        g.lost = true;
        g.never_used = true;
        g.idle_periods = vec![IdlePeriod {
            start_s: 0.0,
            end_s: 700.0,
            duration_s: 700.0,
        }];
        g.other_processes_seen = true;
        g.throttle_reasons = vec!["sw_power_cap".into()];
        // Never used: no idle periods listed; a power cap is not a hardware slowdown.
        assert_eq!(
            findings_of(&g, 120.0, &p),
            [
                GpuFinding::Lost,
                GpuFinding::NeverUsed { allocated_s: 120.0 },
                GpuFinding::OtherProcesses
            ]
        );
        g.never_used = false;
        g.idle_after_s = Some(10.0);
        g.idle_tail_s = Some(2000.0);
        g.utilization_unknown = true;
        g.identity.kind = Some(GpuKind::Mig);
        g.throttle_reasons = vec!["hw_slowdown".into()];
        assert_eq!(
            findings_of(&g, 120.0, &p),
            [
                GpuFinding::Lost,
                GpuFinding::IdleTail {
                    tail_s: 2000.0,
                    after_s: 10.0
                },
                GpuFinding::IdlePeriods {
                    count: 1,
                    min_s: 600.0,
                    total_s: 700.0
                },
                GpuFinding::UtilizationUnknown { mig: true },
                GpuFinding::OtherProcesses,
                GpuFinding::HardwareThrottled {
                    reasons: vec!["hw_slowdown".into()]
                },
            ]
        );
    }

    /// The top-level keys of a JSON object, in the order written.
    fn json_keys(json: &str) -> Vec<String> {
        struct Keys(Vec<String>);
        impl<'de> serde::Deserialize<'de> for Keys {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> serde::de::Visitor<'de> for V {
                    type Value = Keys;
                    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                        f.write_str("an object")
                    }
                    fn visit_map<A: serde::de::MapAccess<'de>>(
                        self,
                        mut m: A,
                    ) -> Result<Keys, A::Error> {
                        let mut v = Vec::new();
                        while let Some(k) = m.next_key::<String>()? {
                            m.next_value::<serde::de::IgnoredAny>()?;
                            v.push(k);
                        }
                        Ok(Keys(v))
                    }
                }
                d.deserialize_map(V)
            }
        }
        serde_json::from_str::<Keys>(json).unwrap().0
    }

    /// The identity is held once, flattened: the JSON of a summary keeps its published keys in
    /// their published order (archived documents, the report's consumers).
    #[test]
    fn summary_json_keys_keep_their_order() {
        let s = series(vec![nv(0)], 2, |_| {
            vec![(Some(90), GIB, Some(1), 300_000, None)]
        });
        let g = summarize_gpus(&s, 120.0).remove(0);
        assert_eq!(
            json_keys(&serde_json::to_string(&g).unwrap()),
            [
                "node",
                "slot",
                "kind",
                "index",
                "gres_index",
                "minor",
                "uuid",
                "pci_bus_id",
                "name",
                "parent_uuid",
                "samples",
                "util_mean_pct",
                "util_max_pct",
                "mem_util_mean_pct",
                "util_source",
                "util_coverage_share",
                "job_util_mean_pct",
                "job_util_max_pct",
                "job_mem_util_mean_pct",
                "utilization_unknown",
                "mem_peak_bytes",
                "mem_total_bytes",
                "job_mem_peak_bytes",
                "job_processes_max",
                "other_processes_seen",
                "power_mean_w",
                "power_max_w",
                "energy_kwh",
                "energy_estimated",
                "idle_periods",
                "idle_s",
                "observed_s",
                "never_used",
                "idle_after_s",
                "idle_tail_s",
                "gpu_hours_allocated",
                "gpu_hours_wasted",
                "classification",
                "throttle_reasons",
                "lost",
                "findings",
            ]
        );
        // A device of `gpu.jsc` keeps its keys too, and one without any still decodes.
        assert_eq!(
            json_keys(&serde_json::to_string(&nv(0)).unwrap()),
            [
                "kind",
                "index",
                "gres_index",
                "minor",
                "uuid",
                "pci_bus_id",
                "name",
                "parent_uuid",
                "mem_total_bytes",
            ]
        );
        let d: GpuDevice =
            serde_json::from_str(r#"{"uuid":"GPU-1","mem_total_bytes":8,"future":1}"#).unwrap();
        assert_eq!(d.identity.uuid.as_deref(), Some("GPU-1"));
        assert_eq!(d.mem_total_bytes, Some(8));
    }
}
