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
use super::{GpuIdentity, GpuKind};
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
}

/// Where a GPU's utilization figures come from.
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
    pub kind: Option<GpuKind>,
    /// NVML index / DRM card as the sampler saw it (display only).
    pub index: Option<u32>,
    /// SLURM's gres index.
    pub gres_index: Option<u32>,
    pub minor: Option<u32>,
    pub uuid: Option<String>,
    pub pci_bus_id: Option<String>,
    pub name: Option<String>,
    /// MIG: the physical GPU.
    pub parent_uuid: Option<String>,
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
            index: g.gres_index.or(g.index),
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
            summarize_one(
                series,
                slot as u32,
                id,
                start_ms,
                end_ms,
                job_elapsed_s,
                lost,
                p,
            )
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn summarize_one(
    series: &GpuSeries,
    slot: u32,
    id: &GpuIdentity,
    start_ms: u64,
    end_ms: u64,
    elapsed_s: f64,
    lost: bool,
    p: &GpuSummaryParams,
) -> GpuSummary {
    // (interval start, interval end, the device's share) in time order.
    let mut points: Vec<(u64, u64, &DeviceBucket)> = Vec::new();
    let mut prev_end: Option<u64> = None;
    for b in &series.buckets {
        let from = prev_end.unwrap_or(b.t_first_ms).min(b.t_last_ms);
        prev_end = Some(b.t_last_ms);
        if let Some(d) = b.device(slot) {
            points.push((from, b.t_last_ms, d));
        }
    }
    let rel = |t: u64| t.saturating_sub(start_ms) as f64 / 1000.0;
    let sum_gauge = |f: fn(&DeviceBucket) -> Option<crate::spool::Gauge>| {
        let gs: Vec<_> = points.iter().filter_map(|(_, _, d)| f(d)).collect();
        if gs.is_empty() {
            return None;
        }
        let (sum, count, max) = gs.iter().fold((0u128, 0u64, 0u64), |(s, c, m), g| {
            (s + g.sum as u128, c + g.count as u64, m.max(g.max))
        });
        Some((sum as f64 / count.max(1) as f64, max))
    };
    let util = sum_gauge(|d| d.util_gpu_pct);
    let mem_util = sum_gauge(|d| d.util_mem_pct);
    let job_util = sum_gauge(|d| d.job_util_gpu_pct);
    let job_mem_util = sum_gauge(|d| d.job_util_mem_pct);
    let flags = points
        .iter()
        .filter_map(|(_, _, d)| d.util_flags)
        .fold(None, |a: Option<u64>, f| Some(a.unwrap_or(0) | f));
    let util_source =
        flags.and_then(
            |f| match (f & UTIL_FROM_BUFFER != 0, f & UTIL_FROM_POINT_READS != 0) {
                (true, false) => Some(GpuUtilSource::DriverBuffer),
                (false, true) => Some(GpuUtilSource::PointReads),
                (true, true) => Some(GpuUtilSource::Mixed),
                (false, false) => None,
            },
        );
    // Coverage: the buffer's time over the length of the intervals it sampled.
    let (covered_ms, buffered_ms) = points
        .iter()
        .filter(|(_, _, d)| d.util_flags.is_some_and(|f| f & UTIL_FROM_BUFFER != 0))
        .fold((0u64, 0u64), |(c, l), (from, to, d)| {
            (
                c.saturating_add(d.util_covered_ms.unwrap_or(0)),
                l.saturating_add(to.saturating_sub(*from)),
            )
        });
    let util_coverage_share =
        (buffered_ms > 0).then(|| (covered_ms as f64 / buffered_ms as f64).min(1.0));
    let others_active = flags.is_some_and(|f| f & UTIL_OTHERS_ACTIVE != 0);
    let power = sum_gauge(|d| d.power_mw);
    let max_of = |f: fn(&DeviceBucket) -> Option<crate::spool::Gauge>| {
        points
            .iter()
            .filter_map(|(_, _, d)| f(d))
            .map(|g| g.max)
            .max()
    };
    let mem_peak = max_of(|d| d.mem_used_bytes);
    let job_mem_peak = max_of(|d| d.job_mem_bytes);
    let procs_max = max_of(|d| d.job_processes);
    let others = max_of(|d| d.other_processes).is_some_and(|m| m > 0) || others_active;
    let mem_total = points
        .iter()
        .rev()
        .find_map(|(_, _, d)| d.mem_total_bytes)
        .or(id.mem_total_bytes);
    let samples: u64 = points.iter().map(|(_, _, d)| d.samples as u64).sum();

    // Energy: the counter's increases; else the integral of mean power.
    let energy_mj: Option<u64> = points
        .iter()
        .filter_map(|(_, _, d)| d.energy_mj)
        .fold(None, |a, e| Some(a.unwrap_or(0u64).saturating_add(e)));
    let (energy_kwh, energy_estimated) = match energy_mj {
        Some(mj) => (Some(mj as f64 / 3.6e9), false),
        None => {
            let mut j = 0.0;
            let mut any = false;
            for (from, to, d) in &points {
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
    };

    // The utilization that is the job's: its own share where known (a shared GPU), else the
    // device's.
    let job_gauge = |d: &DeviceBucket| d.job_util_gpu_pct.or(d.util_gpu_pct);
    // Idle state per interval: Some(true) idle, Some(false) busy, None unknown.
    let state = |d: &DeviceBucket| -> Option<bool> {
        if let Some(u) = job_gauge(d) {
            return Some(u.max as f64 <= p.idle_util_pct);
        }
        d.job_processes.map(|g| g.max == 0)
    };
    let mut idle_ms = 0u64;
    let mut observed_ms = 0u64;
    let mut periods = Vec::new();
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
    let mut last_busy_ms: Option<u64> = None;
    let mut any_state = false;
    for (from, to, d) in &points {
        match state(d) {
            Some(true) => {
                any_state = true;
                idle_ms = idle_ms.saturating_add(to.saturating_sub(*from));
                observed_ms = observed_ms.saturating_add(to.saturating_sub(*from));
                run = Some(match run {
                    Some((a, _)) => (a, *to),
                    None => (*from, *to),
                });
            }
            Some(false) => {
                any_state = true;
                observed_ms = observed_ms.saturating_add(to.saturating_sub(*from));
                last_busy_ms = Some(*to);
                close(&mut run, &mut periods);
            }
            None => close(&mut run, &mut periods),
        }
    }
    close(&mut run, &mut periods);

    let utilization_unknown = util.is_none();
    let ever_busy = points
        .iter()
        .filter_map(|(_, _, d)| job_gauge(d))
        .any(|g| g.max as f64 > p.idle_util_pct);
    // The mean that is the job's, for the classification.
    let job_mean = job_util.or(util).map(|(m, _)| m);
    let ever_proc = procs_max.is_some_and(|m| m > 0);
    let never_used = any_state && !ever_busy && !ever_proc;

    // Used, then idle to the end: from the last busy interval to the job's end.
    let series_end = points.last().map(|(_, to, _)| *to).unwrap_or(end_ms);
    let end = end_ms.max(series_end);
    let (idle_after_s, idle_tail_s) = match last_busy_ms {
        Some(t) if ever_busy || ever_proc => {
            let tail = end.saturating_sub(t) as f64 / 1000.0;
            if tail >= p.tail_idle_min_s && tail >= p.tail_idle_min_share * elapsed_s {
                (Some(rel(t)), Some(tail))
            } else {
                (None, None)
            }
        }
        _ => (None, None),
    };

    let gpu_hours_allocated = elapsed_s.max(0.0) / 3600.0;
    let idle_share = (observed_ms > 0).then(|| idle_ms as f64 / observed_ms as f64);
    let gpu_hours_wasted = if never_used {
        Some(gpu_hours_allocated)
    } else {
        idle_share.map(|s| s * gpu_hours_allocated)
    };
    let classification = if !any_state {
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
    };
    let throttle_bits = points
        .iter()
        .filter_map(|(_, _, d)| d.throttle_reasons)
        .fold(0u64, |a, b| a | b);
    let throttle_reasons: Vec<String> = THROTTLE_REASONS
        .iter()
        .filter(|(bit, _)| throttle_bits & bit != 0)
        .map(|(_, n)| n.to_string())
        .collect();

    let mut findings = Vec::new();
    if lost {
        findings.push(GpuFinding::Lost);
    }
    if never_used {
        findings.push(GpuFinding::NeverUsed {
            allocated_s: elapsed_s.max(0.0),
        });
    } else if let (Some(after), Some(tail)) = (idle_after_s, idle_tail_s) {
        findings.push(GpuFinding::IdleTail {
            tail_s: tail,
            after_s: after,
        });
    }
    if !never_used && !periods.is_empty() {
        findings.push(GpuFinding::IdlePeriods {
            count: periods.len() as u32,
            min_s: p.idle_min_s,
            total_s: periods.iter().map(|x| x.duration_s).sum(),
        });
    }
    if utilization_unknown && samples > 0 {
        findings.push(GpuFinding::UtilizationUnknown {
            mig: id.kind == Some(GpuKind::Mig),
        });
    }
    if others {
        findings.push(GpuFinding::OtherProcesses);
    }
    if throttle_reasons
        .iter()
        .any(|r| r.contains("thermal") || r == "hw_slowdown" || r.contains("brake"))
    {
        findings.push(GpuFinding::HardwareThrottled {
            reasons: throttle_reasons.clone(),
        });
    }

    GpuSummary {
        node: Some(series.header.node.clone()),
        slot,
        kind: id.kind,
        index: id.index,
        gres_index: id.gres_index,
        minor: id.minor,
        uuid: id.uuid.clone(),
        pci_bus_id: id.pci_bus_id.clone(),
        name: id.name.clone(),
        parent_uuid: id.parent_uuid.clone(),
        samples,
        util_mean_pct: util.map(|(m, _)| m),
        util_max_pct: util.map(|(_, x)| x as f64),
        mem_util_mean_pct: mem_util.map(|(m, _)| m),
        util_source,
        util_coverage_share,
        job_util_mean_pct: job_util.map(|(m, _)| m),
        job_util_max_pct: job_util.map(|(_, x)| x as f64),
        job_mem_util_mean_pct: job_mem_util.map(|(m, _)| m),
        utilization_unknown,
        mem_peak_bytes: mem_peak,
        mem_total_bytes: mem_total,
        job_mem_peak_bytes: job_mem_peak,
        job_processes_max: procs_max,
        other_processes_seen: others,
        power_mean_w: power.map(|(m, _)| m / 1000.0),
        power_max_w: power.map(|(_, x)| x as f64 / 1000.0),
        energy_kwh,
        energy_estimated,
        idle_periods: periods,
        idle_s: any_state.then_some(idle_ms as f64 / 1000.0),
        observed_s: observed_ms as f64 / 1000.0,
        never_used,
        idle_after_s,
        idle_tail_s,
        gpu_hours_allocated,
        gpu_hours_wasted,
        classification,
        throttle_reasons,
        lost,
        findings,
    }
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
                id.label(),
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
                id.label(),
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
        .filter(|g| !g.never_used && g.kind != Some(GpuKind::Mig))
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

    fn nv(i: u32) -> GpuIdentity {
        GpuIdentity {
            kind: Some(GpuKind::Nvidia),
            index: Some(i),
            gres_index: Some(i),
            minor: Some(i),
            uuid: Some(format!("GPU-{i:08}")),
            name: Some("NVIDIA A100-SXM4-80GB".into()),
            mem_total_bytes: Some(80 * GIB),
            ..Default::default()
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
    fn series(devs: Vec<GpuIdentity>, minutes: u64, f: impl Fn(u64) -> Vec<R>) -> GpuSeries {
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
        id.kind = Some(GpuKind::Mig);
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
}
