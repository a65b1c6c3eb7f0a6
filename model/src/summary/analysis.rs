//! Report-level analysis of a [`JobSummary`]: waste, scalability verdict, classification, anomalies
//! and resubmit-ready `#SBATCH` advice. Pure. Every result is a typed fact with the numbers it rests
//! on (units in the names); no sentence is stored: the words are the presenter's
//! (`report/src/present/`), so every view words a fact the same way.
//!
//! Enumerated values serialise as the lower/snake_case strings the archive has always used
//! (`"serial"`, `"cpu_bound"`, `"warning"`), so scripts reading the archive keep working.
//!
//! Thresholds come from [`crate::params::Report`] (documented in docs/configuration.md).

use super::{JobSummary, NodeSummary, Point};
use crate::gpu::summary::{GpuAdvice, GpuFinding, GpuRef};
use crate::params::Report;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Analysis {
    pub waste: Waste,
    pub scalability: Option<Scalability>,
    pub classification: Classification,
    pub anomalies: Vec<Finding>,
    pub advice: Vec<Advice>,
    /// Why some or all advice was not given (a short job, no data); `None`: every check ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advice_withheld: Option<AdviceWithheld>,
    /// The job left no usable samples: nothing is claimed about its use.
    #[serde(default)]
    pub insufficient_data: bool,
    /// How the job compares with its partition's recent jobs (the audit index's cohorts, read by
    /// the Epilog); empty when there is no index or its history is thin.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub peers: Vec<PeerRank>,
    /// What the user's earlier runs of the same job name ask for (the audit index's history);
    /// absent with fewer runs than `audit.history_min_runs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<HistoryAdvice>,
}

/// The figure a peer percentile ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PeerMetric {
    CpuEfficiency,
    MemEfficiency,
}

/// The job's standing among the jobs of its cluster and partition that ended in the last
/// `window_days` days (`cohort_jobs` of them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PeerRank {
    pub metric: PeerMetric,
    /// The job's own figure, percent.
    pub value_pct: f64,
    /// Share of the cohort below the job's figure (ties count half), 0–100.
    pub percentile: f64,
    pub median_pct: f64,
    pub partition: String,
    pub cohort_jobs: u64,
    pub window_days: u32,
}

/// Requests from all of a user's recent runs of the same job (same batch script, else same name),
/// not one run: p95 of each figure over `runs` runs (this one included), with the report's headroom
/// and margin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HistoryAdvice {
    /// This job's name.
    pub name: String,
    /// What made the earlier runs "the same job". Absent in documents archived before runs were
    /// matched by script: those were matched by name.
    #[serde(default)]
    pub basis: HistoryBasis,
    pub runs: u32,
    pub mem_peak_p95_bytes: Option<u64>,
    pub mem_request: Option<Request>,
    pub elapsed_p95_s: Option<f64>,
    pub time_request: Option<Request>,
    /// Mean busy cores (CPU time ÷ elapsed) at the 95th percentile of the runs.
    pub busy_cores_p95: Option<f64>,
    pub cpus_request: Option<Request>,
}

/// How earlier runs were matched to this job for [`HistoryAdvice`].
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum HistoryBasis {
    /// Runs with the same job name.
    #[default]
    SameName,
    /// Runs of the same batch script (the same `script_sha256`), whatever their names.
    SameScript,
}

/// Why advice was (partly) withheld.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AdviceWithheld {
    /// The job ran `elapsed_s`, under the `min_s` needed to judge its CPU, memory and time use.
    ShortJob { elapsed_s: f64, min_s: u64 },
    /// No samples: nothing to judge.
    NoData,
}

/// Allocated-but-unused resources.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Waste {
    pub core_hours_allocated: Option<f64>,
    pub core_hours_used: Option<f64>,
    pub core_hours_wasted: Option<f64>,
    /// Memory GB-hours: requested per node × nodes × elapsed.
    pub mem_gb_hours_allocated: Option<f64>,
    /// Peak memory per node × nodes × elapsed: what the job needed to hold for its whole life.
    /// `None` unless every reported node's peak was measured ([`mem_gb_hours_needed`]).
    pub mem_gb_hours_needed: Option<f64>,
    pub mem_gb_hours_wasted: Option<f64>,
    #[serde(default)]
    pub gpu_hours_allocated: Option<f64>,
    #[serde(default)]
    pub gpu_hours_wasted: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NodeLoad {
    pub node: String,
    pub cpu_s: Option<f64>,
    pub mean_busy_cores: Option<f64>,
    /// This node's CPU time relative to the mean over nodes (1.0 = average).
    pub share_of_mean: Option<f64>,
}

/// How the job used its cores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// At most one core busy (p95) on an allocation of more than one.
    Serial,
    /// Three quarters or more of the allocated cores busy on average.
    Parallel,
    /// More than one core at times, but well below the allocation.
    PartiallyParallel,
    /// Essentially no CPU use.
    Idle,
    /// A one-core allocation that was used (a parallel/serial verdict means nothing there).
    SingleCore,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Scalability {
    pub verdict: Verdict,
    pub allocated_cores: Option<u32>,
    /// Time-weighted distribution of busy cores over the whole job (summed over nodes).
    pub busy_cores_p50: f64,
    pub busy_cores_p95: f64,
    pub busy_cores_max: f64,
    pub busy_cores_mean: f64,
    /// Share of wall time with at most one busy core.
    pub share_time_at_most_one_core_pct: f64,
    /// Serial share of the work implied by the timeline.
    pub serial_work_fraction: Option<f64>,
    /// Amdahl's law: the best speed-up more cores could give this job's observed work mix.
    pub amdahl_speedup_ceiling: Option<f64>,
    /// Job-level busy-cores timeline (resampled, for sparklines and charts).
    pub busy_cores_timeline: Vec<f64>,
    pub nodes: Vec<NodeLoad>,
    /// Nodes of the allocation (reported or not) the imbalance is measured over.
    #[serde(default)]
    pub nodes_allocated: u32,
    /// Largest node CPU time ÷ mean node CPU time (1.0 = balanced).
    pub imbalance_max_over_mean: Option<f64>,
    /// Nodes that used less than a quarter of the mean node's CPU time (or never reported).
    pub underused_nodes: Vec<String>,
}

crate::vocabulary! {
    // The spelling is the archived one (`cpu_bound`); the report words it with `-` (`cpu-bound`,
    // and `unknown` for no data, hence that alias): a person may type any of them (`--class`).
    /// What limited the job, in one word.
    #[derive(
        Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
    )]
    pub enum JobClass {
        CpuBound = "cpu_bound",
        MemoryBound = "memory_bound",
        IoBound = "io_bound",
        Idle = "idle",
        #[default]
        Mixed = "mixed",
        GpuBound = "gpu_bound",
        GpuIdle = "gpu_idle",
        /// Network transfer dominated (the kernel view's socket bytes).
        NetworkBound = "network_bound",
        /// The tasks spent their time waiting: for a CPU (more runnable threads than cores) or
        /// on locks (the kernel view).
        Waiting = "waiting",
        /// No samples: no class can be given.
        InsufficientData = "insufficient_data" | "unknown",
    }
}

/// The figures a class rests on.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Evidence {
    pub cpu_efficiency_pct: Option<f64>,
    pub mem_peak_pct: Option<f64>,
    /// Read + written bytes ÷ elapsed.
    pub io_bytes_per_s: Option<f64>,
    /// Times the job hit its memory limit (`failcnt`), when that made it memory-bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_limit_hits: Option<u64>,
    /// Each GPU's mean utilization (`None`: unknown), when the job had GPUs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<GpuUse>,
    /// How many of `gpus` were idle or never used.
    #[serde(default)]
    pub gpus_idle: u32,
    /// The kernel view: share of runnable time spent waiting for a CPU, percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_wait_pct: Option<f64>,
    /// The kernel view: synchronisation system calls (futex…) as a share of all, percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_share_pct: Option<f64>,
    /// The kernel view: socket bytes sent + received ÷ elapsed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub net_bytes_per_s: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GpuUse {
    pub gpu: GpuRef,
    /// The GPU's mean utilization; on a GPU other processes used too, the job's own share.
    pub util_mean_pct: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Classification {
    pub class: JobClass,
    pub evidence: Evidence,
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Info,
    Warning,
    Critical,
}

/// One anomaly: how serious, and what (with its numbers).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Finding {
    pub severity: Severity,
    #[serde(flatten)]
    pub what: FindingKind,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FindingKind {
    /// Memory grew steadily: least-squares slope and its R², growth over the node's run.
    MemoryLeak {
        node: String,
        slope_bytes_per_s: f64,
        r2: f64,
        growth_bytes: f64,
    },
    /// Busy for `busy_s`, then idle to the end (`idle_s`, `idle_share_pct` of the node's run).
    BusyThenIdle {
        node: String,
        busy_s: f64,
        idle_s: f64,
        idle_share_pct: f64,
    },
    /// Busy cores below `idle_cores` from `start_s` to `end_s` (seconds since the node's start).
    IdlePhase {
        node: String,
        start_s: f64,
        end_s: f64,
        idle_cores: f64,
    },
    /// Memory peaked at `pct` % of the limit without an OOM kill.
    NearOom {
        node: String,
        peak_bytes: u64,
        limit_bytes: u64,
        pct: f64,
    },
    /// The kernel OOM killer killed `kills` processes.
    Oom { node: String, kills: u64 },
    /// The job was killed at its time limit.
    Timeout { limit_s: Option<u64> },
    /// A finding about one GPU (see [`GpuFinding`]).
    Gpu { gpu: GpuRef, finding: GpuFinding },
    /// The node's tasks waited for a CPU `wait_pct` % of their runnable time (run + wait, the
    /// kernel view), with `threads_max` threads on `cores` allocated cores.
    CpuWait {
        node: String,
        wait_pct: f64,
        wait_s: f64,
        threads_max: Option<u64>,
        cores: Option<u32>,
    },
    /// `pct` % of the job's `calls` system calls were synchronisation (futex…): lock contention.
    LockContention {
        pct: f64,
        sync_calls: u64,
        calls: u64,
    },
    /// Many reads or writes of under 4 KiB each.
    SmallIo { small_reads: u64, small_writes: u64 },
    /// The node's tasks were stalled waiting for `resource` for `pct` % of its wall time (cgroup v2
    /// pressure stall information, `some`), at or above `threshold_pct` (`stall_warn_pct`).
    Stalled {
        node: String,
        resource: StallResource,
        pct: f64,
        threshold_pct: f64,
    },
}

/// What a job's tasks waited for (the three pressure files of cgroup v2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StallResource {
    Cpu,
    Memory,
    Io,
}

/// A resubmit-ready `#SBATCH` option.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "option", content = "value", rename_all = "snake_case")]
pub enum Request {
    CpusPerTask(u32),
    /// `--mem`, in MiB (a multiple of 100 MiB below 1 GiB, else of 1 GiB; see [`mem_flag`]).
    MemMib(u64),
    /// `--time`, in seconds (a multiple of 5 minutes; see [`time_flag`]).
    TimeS(u64),
    Nodes(u32),
    GresGpu(u32),
    /// `--mem-update=<margin_pct>@<delay_min>` (SLURM 26.05, [`mem_update_advice`]): after
    /// `delay_min` minutes SLURM lowers the memory limit, once, to the job's RSS plus `margin_pct` %.
    MemUpdate {
        margin_pct: u32,
        delay_min: u64,
    },
}

impl Request {
    /// The line to paste into the job script, in SLURM's notation.
    pub fn sbatch_line(&self) -> String {
        match *self {
            Request::CpusPerTask(n) => format!("#SBATCH --cpus-per-task={n}"),
            Request::MemMib(m) if m >= 1024 && m % 1024 == 0 => {
                format!("#SBATCH --mem={}G", m / 1024)
            }
            Request::MemMib(m) => format!("#SBATCH --mem={m}M"),
            Request::TimeS(s) => format!("#SBATCH --time={}", slurm_time(s)),
            Request::Nodes(n) => format!("#SBATCH --nodes={n}"),
            Request::GresGpu(n) => format!("#SBATCH --gres=gpu:{n}"),
            Request::MemUpdate {
                margin_pct,
                delay_min,
            } => format!("#SBATCH --mem-update={margin_pct}@{delay_min}"),
        }
    }
}

/// One piece of advice: what to request next time (if it is an option) and why, with the figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Advice {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<Request>,
    /// `request` in SLURM's notation (`#SBATCH --mem=400M`), for scripts that paste it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sbatch: Option<String>,
    pub reason: AdviceReason,
}

impl Advice {
    fn new(request: Option<Request>, reason: AdviceReason) -> Self {
        Advice {
            sbatch: request.as_ref().map(Request::sbatch_line),
            request,
            reason,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AdviceReason {
    /// A serial job on `cores` cores (p50 busy, share of time at ≤ 1 core, CPU efficiency).
    Serial {
        cores: u32,
        busy_cores_p50: f64,
        busy_cores_p95: f64,
        share_time_at_most_one_core_pct: f64,
        cpu_efficiency_pct: f64,
    },
    /// Fewer cores would do: p95 busy cores (+10 %) per node.
    FewerCores {
        cores: u32,
        busy_cores_p95: f64,
        cpu_efficiency_pct: f64,
    },
    /// Killed for exceeding `limit_bytes`; its true need is unknown, so double it.
    OomKilled { limit_bytes: u64 },
    /// Peak close to the request: add headroom.
    NearOom {
        peak_bytes: u64,
        request_bytes: u64,
        pct: f64,
        headroom_pct: f64,
    },
    /// Peak far below the request.
    MemoryUnused {
        peak_bytes: u64,
        request_bytes: u64,
        pct: f64,
        headroom_pct: f64,
    },
    /// The job hit its time limit (`limit_s`, exact) before finishing: double it (or checkpoint).
    TimedOut { limit_s: u64 },
    /// Ran `elapsed_s` of a `limit_s` limit: a tighter limit (+`margin_pct`) starts sooner.
    TimeUnused {
        elapsed_s: f64,
        limit_s: u64,
        margin_pct: f64,
    },
    /// Some of the `nodes_allocated` nodes did almost no work.
    NodesUnderused {
        nodes: Vec<String>,
        nodes_allocated: u32,
    },
    /// From the GPUs (see [`GpuAdvice`]).
    Gpu { advice: GpuAdvice },
    /// The release has `--mem-update` and what SLURM's RSS counts ([`mem_update_advice`]:
    /// anonymous memory, and shmem on cgroup v2) was `counted_peak_bytes`, most of the peak: from
    /// `delay_s` on, the memory in use plus `margin_pct` % never fell short of what came later,
    /// on any node, so a cut then would have held.
    MemUpdate {
        peak_bytes: u64,
        counted_peak_bytes: u64,
        delay_s: u64,
        margin_pct: f64,
    },
    /// The release has `--mem-update`, but shmem/tmpfs was `shmem_peak_bytes` of the
    /// `peak_bytes` peak on cgroup v1 (or a version not known): SLURM's cut follows RSS, which
    /// leaves shmem out there, while the cgroup limit counts it and cannot reclaim it, so the cut
    /// can OOM the job. A warning, no option.
    MemUpdateUnsafe {
        peak_bytes: u64,
        shmem_peak_bytes: u64,
    },
}

/// Reads an archived `analysis` leniently: a document written before the analysis was typed
/// (schema version 1 stored sentences) yields `None` rather than failing the whole document;
/// the reader can analyse the summary again ([`analyze`] is pure).
pub fn deserialize_lenient<'de, D>(d: D) -> Result<Option<Analysis>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let v = Option::<serde_json::Value>::deserialize(d)?;
    Ok(v.and_then(|v| serde_json::from_value(v).ok()))
}

/// Busy cores below this count as "idle" (noise of shells, sleep loops).
const IDLE_CORES: f64 = 0.05;
/// "At most one core" tolerance (a serial program shows 1.0 ± sampling noise).
const ONE_CORE: f64 = 1.15;
const RESAMPLE_BINS: usize = 240;

/// Piecewise-constant busy cores of one node, sampled at `bins` equal slices of `[0, elapsed]`.
fn resample(points: &[Point], elapsed_s: f64, bins: usize) -> Vec<Option<f64>> {
    let mut out = vec![None; bins];
    if elapsed_s <= 0.0 {
        return out;
    }
    // Each point's value holds for the interval (previous t, t].
    let mut prev_t = 0.0;
    for p in points {
        if let Some(v) = p.busy_cores {
            let a = ((prev_t / elapsed_s) * bins as f64).floor().max(0.0) as usize;
            let b = ((p.t_s / elapsed_s) * bins as f64).ceil().min(bins as f64) as usize;
            for slot in out
                .iter_mut()
                .take(b.max(a + 1).min(bins))
                .skip(a.min(bins.saturating_sub(1)))
            {
                *slot = Some(v);
            }
        }
        prev_t = p.t_s;
    }
    out
}

/// At most `n` values, each the max of the values it covers (peaks survive), rounded to 0.01.
fn downsample(v: &[f64], n: usize) -> Vec<f64> {
    let cols = n.min(v.len()).max(1);
    (0..cols)
        .map(|c| {
            let (a, b) = (
                c * v.len() / cols,
                ((c + 1) * v.len() / cols).max(c * v.len() / cols + 1),
            );
            let m = v[a..b.min(v.len())].iter().cloned().fold(0.0, f64::max);
            (m * 100.0).round() / 100.0
        })
        .collect()
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let idx = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// Time-weighted busy-core statistics of the whole job.
pub fn scalability(s: &JobSummary) -> Option<Scalability> {
    let elapsed = s.elapsed_s;
    let node_series: Vec<Vec<Option<f64>>> = s
        .nodes
        .iter()
        .map(|n| resample(&n.timeline, n.elapsed_s.max(elapsed), RESAMPLE_BINS))
        .collect();
    let mut job: Vec<f64> = Vec::with_capacity(RESAMPLE_BINS);
    for i in 0..RESAMPLE_BINS {
        let vals: Vec<f64> = node_series.iter().filter_map(|v| v[i]).collect();
        if !vals.is_empty() {
            job.push(vals.iter().sum());
        }
    }
    if job.is_empty() {
        return None;
    }
    let mut sorted = job.clone();
    sorted.sort_by(|a, b| a.total_cmp(b));
    let mean = job.iter().sum::<f64>() / job.len() as f64;
    let peak = s
        .nodes
        .iter()
        .map(|n| {
            n.timeline
                .iter()
                .filter_map(|p| p.busy_cores_max.or(p.busy_cores))
                .fold(0.0, f64::max)
        })
        .sum::<f64>()
        .max(percentile(&sorted, 1.0));
    let at_most_one = job.iter().filter(|&&v| v <= ONE_CORE).count() as f64 / job.len() as f64;
    let parallel: Vec<f64> = job.iter().copied().filter(|&v| v > ONE_CORE).collect();
    let (serial_fraction, ceiling) = if parallel.is_empty() {
        (Some(1.0), Some(1.0))
    } else if at_most_one == 0.0 {
        (Some(0.0), None)
    } else {
        let par_mean = parallel.iter().sum::<f64>() / parallel.len() as f64;
        // Work done at ≤1 core is serial; the rest ran on par_mean cores.
        let serial_work = at_most_one;
        let par_work = (1.0 - at_most_one) * par_mean;
        let f = serial_work / (serial_work + par_work);
        (Some(f), Some(1.0 / f))
    };
    let cores = s.alloc.cores;
    let p50 = percentile(&sorted, 0.5);
    let p95 = percentile(&sorted, 0.95);
    let verdict = if mean < IDLE_CORES {
        Verdict::Idle
    } else if cores == Some(1) {
        Verdict::SingleCore
    } else if p95 <= ONE_CORE && cores.is_some_and(|c| c > 1) {
        Verdict::Serial
    } else if cores.is_some_and(|c| mean >= 0.75 * c as f64) {
        Verdict::Parallel
    } else {
        Verdict::PartiallyParallel
    };

    // Per-node imbalance from CPU time.
    let loads: Vec<NodeLoad> = s
        .nodes
        .iter()
        .map(|n| NodeLoad {
            node: n.node.clone(),
            cpu_s: n.cpu.usage_s,
            mean_busy_cores: n
                .cpu
                .usage_s
                .filter(|_| n.elapsed_s > 0.0)
                .map(|c| c / n.elapsed_s),
            share_of_mean: None,
        })
        .collect();
    let cpu: Vec<f64> = loads.iter().filter_map(|l| l.cpu_s).collect();
    let mut nodes = loads;
    let mut imbalance = None;
    let mut underused = Vec::new();
    // A node that never reported counts as fully unused in the imbalance.
    let n_nodes = s.alloc.nodes.max(s.nodes.len() as u32) as usize;
    if n_nodes > 1 && !cpu.is_empty() {
        let mean_cpu = cpu.iter().sum::<f64>() / n_nodes as f64;
        if mean_cpu > 0.0 {
            for l in nodes.iter_mut() {
                l.share_of_mean = l.cpu_s.map(|c| c / mean_cpu);
                if l.share_of_mean.is_some_and(|r| r < 0.25) {
                    underused.push(l.node.clone());
                }
            }
            underused.extend(s.missing_nodes.iter().cloned());
            let max = cpu.iter().cloned().fold(0.0, f64::max);
            imbalance = Some(max / mean_cpu);
        }
    }
    Some(Scalability {
        verdict,
        allocated_cores: cores,
        busy_cores_p50: p50,
        busy_cores_p95: p95,
        busy_cores_max: peak,
        busy_cores_mean: mean,
        share_time_at_most_one_core_pct: at_most_one * 100.0,
        serial_work_fraction: serial_fraction,
        amdahl_speedup_ceiling: ceiling,
        // Stored at sparkline resolution; the statistics above used the full resampling.
        busy_cores_timeline: downsample(&job, 60),
        nodes,
        nodes_allocated: n_nodes as u32,
        imbalance_max_over_mean: imbalance,
        underused_nodes: underused,
    })
}

/// Hours in a second: every resource-hour figure is `× elapsed_s × HOURS_PER_S`.
pub const HOURS_PER_S: f64 = 1.0 / 3600.0;
/// Bytes in a GiB: memory GB-hours are GiB-hours.
pub const BYTES_PER_GIB: f64 = 1024.0 * 1024.0 * 1024.0;

// The formulas of the waste figures, one each. The report ([`waste`]), the audit row and the
// columns the audit index computes on read (audit/src/arrow.rs `DERIVED`) all call these, so the
// same job has the same figures in every view, to the bit (a test in audit/src/index/tests.rs
// holds the index to the row, one in audit/src/row.rs the row to the report).

/// Core-hours allocated: `cores × elapsed`.
pub fn core_hours_allocated(cores: u32, elapsed_s: f64) -> f64 {
    f64::from(cores) * (elapsed_s * HOURS_PER_S)
}

/// Core-hours used: the CPU time.
pub fn core_hours_used(cpu_usage_s: f64) -> f64 {
    cpu_usage_s * HOURS_PER_S
}

/// Memory GB-hours allocated: the request per node × nodes (at least one) × elapsed.
pub fn mem_gb_hours_allocated(mem_per_node_bytes: u64, nodes: u32, elapsed_s: f64) -> f64 {
    mem_per_node_bytes as f64 / BYTES_PER_GIB * f64::from(nodes.max(1)) * (elapsed_s * HOURS_PER_S)
}

/// Memory GB-hours needed: each reported node's peak × elapsed, summed. Unknown (`None`) unless
/// every node has a measured peak: a node without one would count as needing nothing, and the
/// job's memory would read as unused when it was only not measured. No node: unknown too.
pub fn mem_gb_hours_needed(node_peaks_bytes: &[Option<u64>], elapsed_s: f64) -> Option<f64> {
    if node_peaks_bytes.is_empty() {
        return None;
    }
    let gib: Option<Vec<f64>> = node_peaks_bytes
        .iter()
        .map(|p| p.map(|p| p as f64 / BYTES_PER_GIB))
        .collect();
    Some(gib?.iter().sum::<f64>() * (elapsed_s * HOURS_PER_S))
}

/// The part of `total_h` not in `part_h`, never below 0: the unused hours of an allocation (and
/// the used GPU-hours, the allocation less the wasted ones).
pub fn remaining_h(total_h: f64, part_h: f64) -> f64 {
    (total_h - part_h).max(0.0)
}

/// [`remaining_h`] of two figures that may be unknown: unknown when either is.
fn remaining(total_h: Option<f64>, part_h: Option<f64>) -> Option<f64> {
    Some(remaining_h(total_h?, part_h?))
}

/// Allocated-but-unused resources of the job, from its summary alone. A figure whose inputs were
/// not measured is `None` (said "not measured" in the report), never 0 used or 100 % unused.
pub fn waste(s: &JobSummary) -> Waste {
    let core_alloc = s.alloc.cores.map(|c| core_hours_allocated(c, s.elapsed_s));
    let core_used = s.cpu.usage_s.map(core_hours_used);
    let mem_alloc = s
        .alloc
        .mem_per_node_bytes
        .map(|m| mem_gb_hours_allocated(m, s.alloc.nodes, s.elapsed_s));
    let peaks: Vec<Option<u64>> = s.nodes.iter().map(|n| n.mem.peak_bytes).collect();
    let mem_needed = mem_gb_hours_needed(&peaks, s.elapsed_s);
    let gpus: Vec<&crate::gpu::GpuSummary> = s.nodes.iter().flat_map(|n| &n.gpus).collect();
    let (gpu_alloc, gpu_wasted) = if gpus.is_empty() {
        (None, None)
    } else {
        // A GPU without a figure (its utilization unknown) adds nothing; none with one: unknown.
        let wasted: Vec<f64> = gpus.iter().filter_map(|g| g.gpu_hours_wasted).collect();
        (
            Some(gpus.iter().map(|g| g.gpu_hours_allocated).sum()),
            (!wasted.is_empty()).then(|| wasted.iter().sum()),
        )
    };
    Waste {
        core_hours_allocated: core_alloc,
        core_hours_used: core_used,
        core_hours_wasted: remaining(core_alloc, core_used),
        mem_gb_hours_allocated: mem_alloc,
        mem_gb_hours_needed: mem_needed,
        mem_gb_hours_wasted: remaining(mem_alloc, mem_needed),
        gpu_hours_allocated: gpu_alloc,
        gpu_hours_wasted: gpu_wasted,
    }
}

impl Waste {
    /// GPU-hours used: the allocation less the wasted GPU-hours.
    pub fn gpu_hours_used(&self) -> Option<f64> {
        remaining(self.gpu_hours_allocated, self.gpu_hours_wasted)
    }
}

/// Least-squares slope (bytes/s) and R² of memory over time.
fn mem_trend(n: &NodeSummary) -> Option<(f64, f64)> {
    let pts: Vec<(f64, f64)> = n
        .timeline
        .iter()
        .filter_map(|p| p.mem_bytes.map(|m| (p.t_s, m as f64)))
        .collect();
    if pts.len() < 6 {
        return None;
    }
    let k = pts.len() as f64;
    let (mx, my) = (
        pts.iter().map(|p| p.0).sum::<f64>() / k,
        pts.iter().map(|p| p.1).sum::<f64>() / k,
    );
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let syy: f64 = pts.iter().map(|p| (p.1 - my).powi(2)).sum();
    if sxx <= 0.0 || syy <= 0.0 {
        return None;
    }
    let slope = sxy / sxx;
    Some((slope, sxy * sxy / (sxx * syy)))
}

/// Idle phases of one node: (start_s, end_s) with busy cores below [`IDLE_CORES`] for at least `min_s`.
fn idle_phases(n: &NodeSummary, min_s: f64) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    let mut start: Option<f64> = None;
    let mut prev_t = 0.0;
    for p in &n.timeline {
        match p.busy_cores_max.or(p.busy_cores) {
            Some(v) if v < IDLE_CORES => {
                start.get_or_insert(prev_t);
            }
            Some(_) => {
                if let Some(s0) = start.take() {
                    if prev_t - s0 >= min_s {
                        out.push((s0, prev_t));
                    }
                }
            }
            None => {}
        }
        prev_t = p.t_s;
    }
    if let Some(s0) = start {
        if prev_t - s0 >= min_s {
            out.push((s0, prev_t));
        }
    }
    out
}

/// A node's findings: a steady memory climb, busy-then-idle, idle phases, near-OOM and OOM kills.
pub fn anomalies(s: &JobSummary, cfg: &Report) -> Vec<Finding> {
    let mut f = Vec::new();
    let idle_min_s = cfg.idle_phase_min_s as f64;
    for n in &s.nodes {
        if let (Some((slope, r2)), Some(peak)) = (mem_trend(n), n.mem.peak_bytes) {
            let growth = slope * n.elapsed_s;
            if slope > 0.0
                && r2 >= 0.8
                && growth >= 0.2 * peak as f64
                && growth >= 64.0 * 1024.0 * 1024.0
            {
                f.push(Finding {
                    severity: Severity::Warning,
                    what: FindingKind::MemoryLeak {
                        node: n.node.clone(),
                        slope_bytes_per_s: slope,
                        r2,
                        growth_bytes: growth,
                    },
                });
            }
        }
        let phases = idle_phases(n, idle_min_s);
        let tail = phases
            .last()
            .filter(|(_, e)| (n.elapsed_s - e).abs() <= (n.elapsed_s * 0.05).max(60.0));
        if let Some((a, _)) = tail.filter(|(a, b)| b - a >= 0.25 * n.elapsed_s && *a > 0.0) {
            f.push(Finding {
                severity: Severity::Warning,
                what: FindingKind::BusyThenIdle {
                    node: n.node.clone(),
                    busy_s: *a,
                    idle_s: n.elapsed_s - a,
                    idle_share_pct: 100.0 * (n.elapsed_s - a) / n.elapsed_s,
                },
            });
        }
        for (a, b) in phases
            .iter()
            .filter(|p| Some(*p) != tail.filter(|(a, _)| *a > 0.0))
        {
            f.push(Finding {
                severity: Severity::Info,
                what: FindingKind::IdlePhase {
                    node: n.node.clone(),
                    start_s: *a,
                    end_s: *b,
                    idle_cores: IDLE_CORES,
                },
            });
        }
        if let (Some(peak), Some(limit)) =
            (n.mem.peak_bytes, n.mem.limit_bytes.or(n.alloc_mem_bytes))
        {
            let pct = 100.0 * peak as f64 / limit as f64;
            if pct >= cfg.near_oom_pct && n.mem.oom_kill_events.unwrap_or(0) == 0 {
                f.push(Finding {
                    severity: Severity::Warning,
                    what: FindingKind::NearOom {
                        node: n.node.clone(),
                        peak_bytes: peak,
                        limit_bytes: limit,
                        pct,
                    },
                });
            }
        }
        if let Some(p) = &n.pressure {
            for (resource, pct) in [
                (StallResource::Cpu, p.cpu_some_pct),
                (StallResource::Memory, p.mem_some_pct),
                (StallResource::Io, p.io_some_pct),
            ] {
                if let Some(pct) = pct.filter(|&x| x >= cfg.stall_warn_pct) {
                    f.push(Finding {
                        severity: Severity::Warning,
                        what: FindingKind::Stalled {
                            node: n.node.clone(),
                            resource,
                            pct,
                            threshold_pct: cfg.stall_warn_pct,
                        },
                    });
                }
            }
        }
        if let Some(k) = &n.kernel {
            if let (Some(pct), Some(wait_s)) = (k.cpu_wait_pct(), k.cpu_wait_s) {
                // at least a second of waiting: a short job's scheduling noise is no finding
                if pct >= cfg.cpu_wait_warn_pct && wait_s >= 1.0 {
                    f.push(Finding {
                        severity: Severity::Warning,
                        what: FindingKind::CpuWait {
                            node: n.node.clone(),
                            wait_pct: pct,
                            wait_s,
                            threads_max: n.threads_max,
                            cores: n.alloc_cores,
                        },
                    });
                }
            }
        }
        if let Some(k) = n.mem.oom_kill_events.filter(|&k| k > 0) {
            f.push(Finding {
                severity: Severity::Critical,
                what: FindingKind::Oom {
                    node: n.node.clone(),
                    kills: k,
                },
            });
        }
    }
    if let Some(k) = &s.kernel {
        if let Some((pct, sync_calls, calls)) = lock_share(k) {
            if pct >= cfg.lock_share_warn_pct && sync_calls >= cfg.lock_min_calls {
                f.push(Finding {
                    severity: Severity::Warning,
                    what: FindingKind::LockContention {
                        pct,
                        sync_calls,
                        calls,
                    },
                });
            }
        }
        let (r, w) = (k.small_reads.unwrap_or(0), k.small_writes.unwrap_or(0));
        if r.max(w) >= cfg.small_io_warn_calls {
            f.push(Finding {
                severity: Severity::Info,
                what: FindingKind::SmallIo {
                    small_reads: r,
                    small_writes: w,
                },
            });
        }
    }
    if s.state == crate::job::JobState::Timeout {
        f.push(Finding {
            severity: Severity::Critical,
            what: FindingKind::Timeout {
                limit_s: s.alloc.time_limit_s,
            },
        });
    }
    f
}

/// Synchronisation system calls as a share of all (percent), with both counts; `None` without
/// system-call counts.
pub fn lock_share(k: &super::KernelTotals) -> Option<(f64, u64, u64)> {
    let sc = k.syscalls.as_ref()?;
    let total = sc.total();
    (total > 0).then(|| (100.0 * sc.sync as f64 / total as f64, sc.sync, total))
}

pub fn classify(s: &JobSummary, sc: Option<&Scalability>, cfg: &Report) -> Classification {
    let cpu_eff = s.efficiency.cpu_pct;
    let mem_eff = s.efficiency.mem_pct;
    let io_rate = match (s.io.read_bytes, s.io.write_bytes) {
        (None, None) => None,
        // Saturating: the counters come from disk and may be absurd.
        (r, w) => Some(r.unwrap_or(0).saturating_add(w.unwrap_or(0)) as f64 / s.elapsed_s.max(1.0)),
    };
    let k = s.kernel.as_ref();
    // The kernel view adds what the tasks' own block I/O and page-cache writes came to, which
    // the cgroup figures may lack (v2 without the io controller).
    let kernel_io = k.and_then(|k| {
        let parts = [k.block_read_bytes, k.block_write_bytes, k.dirtied_bytes];
        parts.iter().any(|p| p.is_some()).then(|| {
            parts
                .iter()
                .flatten()
                .fold(0u64, |a, b| a.saturating_add(*b)) as f64
                / s.elapsed_s.max(1.0)
        })
    });
    let io_rate = match (io_rate, kernel_io) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    let net_rate = k.and_then(|k| match (k.net_sent_bytes, k.net_received_bytes) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0)) as f64 / s.elapsed_s.max(1.0)),
    });
    let cpu_wait = k.and_then(|k| k.cpu_wait_pct());
    let lock = k.and_then(lock_share);
    let mut ev = Evidence {
        cpu_efficiency_pct: cpu_eff,
        mem_peak_pct: mem_eff,
        io_bytes_per_s: io_rate,
        cpu_wait_pct: cpu_wait,
        lock_share_pct: lock.map(|l| l.0),
        net_bytes_per_s: net_rate,
        ..Default::default()
    };
    let waiting = cpu_wait.is_some_and(|w| w >= cfg.cpu_wait_warn_pct)
        || lock
            .is_some_and(|(pct, n, _)| pct >= cfg.lock_share_warn_pct && n >= cfg.lock_min_calls)
            && cpu_eff.is_some_and(|c| c < cfg.cpu_efficiency_warn_pct);
    let oom = s.mem.oom_kill_events.unwrap_or(0) > 0;
    let failcnt = s.mem.failcnt.unwrap_or(0);
    let class = if sc.is_some_and(|x| x.verdict == Verdict::Idle) {
        JobClass::Idle
    } else if oom
        || mem_eff.is_some_and(|m| m >= cfg.near_oom_pct)
        || failcnt > 0 && mem_eff.is_some_and(|m| m >= 80.0)
    {
        if failcnt > 0 {
            ev.mem_limit_hits = Some(failcnt);
        }
        JobClass::MemoryBound
    } else if waiting {
        JobClass::Waiting
    } else if io_rate.is_some_and(|r| r >= 50.0 * 1024.0 * 1024.0)
        && cpu_eff.is_some_and(|c| c < 50.0)
    {
        JobClass::IoBound
    } else if net_rate.is_some_and(|r| r >= 50.0 * 1024.0 * 1024.0)
        && cpu_eff.is_some_and(|c| c < 50.0)
    {
        JobClass::NetworkBound
    } else if cpu_eff.is_some_and(|c| c >= cfg.cpu_efficiency_warn_pct) {
        JobClass::CpuBound
    } else {
        JobClass::Mixed
    };
    Classification {
        class,
        evidence: ev,
    }
}

/// Rounds a memory size up to a clean `--mem` value in MiB (100 MiB steps below 1 GiB, else 1 GiB
/// steps, at least 100 MiB).
pub fn mem_flag_mib(bytes: f64) -> u64 {
    let mib = (bytes / 1024.0 / 1024.0).ceil().max(100.0);
    if mib < 1024.0 {
        ((mib / 100.0).ceil() * 100.0) as u64
    } else {
        // Saturating: a float beyond u64 (a damaged input) gives u64::MAX, never a wrapped figure.
        ((mib / 1024.0).ceil() as u64).saturating_mul(1024)
    }
}

/// [`mem_flag_mib`] in SLURM's notation (`400M`, `2G`).
pub fn mem_flag(bytes: f64) -> String {
    let m = mem_flag_mib(bytes);
    if m >= 1024 {
        format!("{}G", m / 1024)
    } else {
        format!("{m}M")
    }
}

/// A `--time` value in seconds, rounded up to 5 minutes (at least 5 minutes).
pub fn time_flag_s(seconds: f64) -> u64 {
    // Saturating: a float beyond u64 (a damaged input) gives u64::MAX, never a wrapped figure.
    (((seconds / 60.0 / 5.0).ceil() * 5.0).max(5.0) as u64).saturating_mul(60)
}

/// [`time_flag_s`] in SLURM's notation.
pub fn time_flag(seconds: f64) -> String {
    slurm_time(time_flag_s(seconds))
}

/// Seconds in SLURM's `--time` notation, exactly: `HH:MM:SS`, or `D-HH:MM:SS` from one day.
pub fn slurm_time(s: u64) -> String {
    let (d, h, m, sec) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
    if d > 0 {
        format!("{d}-{h:02}:{m:02}:{sec:02}")
    } else {
        format!("{h:02}:{m:02}:{sec:02}")
    }
}

pub fn advice(s: &JobSummary, sc: Option<&Scalability>, cfg: &Report) -> Vec<Advice> {
    let mut out = Vec::new();
    let enough = s.elapsed_s >= cfg.min_elapsed_for_advice_s as f64;
    // Cores.
    if let (Some(sc), Some(cores), Some(eff)) = (sc, s.alloc.cores, s.efficiency.cpu_pct) {
        if enough && eff < cfg.cpu_efficiency_warn_pct && cores > 1 {
            let per_node = s.alloc.nodes.max(1) as f64;
            let serial = sc.verdict == Verdict::Serial;
            let want = if serial {
                1
            } else {
                ((sc.busy_cores_p95 / per_node) * 1.1).ceil().max(1.0) as u32
            };
            let have_per_node = (cores as f64 / per_node).round() as u32;
            if want < have_per_node {
                let reason = if serial {
                    AdviceReason::Serial {
                        cores,
                        busy_cores_p50: sc.busy_cores_p50,
                        busy_cores_p95: sc.busy_cores_p95,
                        share_time_at_most_one_core_pct: sc.share_time_at_most_one_core_pct,
                        cpu_efficiency_pct: eff,
                    }
                } else {
                    AdviceReason::FewerCores {
                        cores,
                        busy_cores_p95: sc.busy_cores_p95,
                        cpu_efficiency_pct: eff,
                    }
                };
                out.push(Advice::new(Some(Request::CpusPerTask(want)), reason));
            }
        }
    }
    // Memory.
    if let (Some(peak), Some(req)) = (s.mem.peak_bytes, s.alloc.mem_per_node_bytes) {
        let headroom = 1.0 + cfg.mem_headroom_pct / 100.0;
        let oom = s.mem.oom_kill_events.unwrap_or(0) > 0;
        let pct = 100.0 * peak as f64 / req as f64;
        if oom {
            let want = (req as f64).max(peak as f64) * 2.0;
            out.push(Advice::new(
                Some(Request::MemMib(mem_flag_mib(want))),
                AdviceReason::OomKilled { limit_bytes: req },
            ));
        } else if pct >= cfg.near_oom_pct {
            out.push(Advice::new(
                Some(Request::MemMib(mem_flag_mib(peak as f64 * headroom))),
                AdviceReason::NearOom {
                    peak_bytes: peak,
                    request_bytes: req,
                    pct,
                    headroom_pct: cfg.mem_headroom_pct,
                },
            ));
        } else if enough && pct < cfg.mem_efficiency_warn_pct {
            let want = mem_flag_mib(peak as f64 * headroom);
            if want != mem_flag_mib(req as f64) {
                out.push(Advice::new(
                    Some(Request::MemMib(want)),
                    AdviceReason::MemoryUnused {
                        peak_bytes: peak,
                        request_bytes: req,
                        pct,
                        headroom_pct: cfg.mem_headroom_pct,
                    },
                ));
            }
        }
    }
    // Time.
    if let Some(limit) = s.alloc.time_limit_s {
        let margin = 1.0 + cfg.time_margin_pct / 100.0;
        if s.state == crate::job::JobState::Timeout {
            out.push(Advice::new(
                Some(Request::TimeS(time_flag_s(limit as f64 * 2.0))),
                AdviceReason::TimedOut { limit_s: limit },
            ));
        } else if enough
            && s.state == crate::job::JobState::Completed
            && 100.0 * s.elapsed_s / (limit as f64) < cfg.time_efficiency_warn_pct
        {
            let want = time_flag_s(s.elapsed_s * margin);
            if want < limit {
                out.push(Advice::new(
                    Some(Request::TimeS(want)),
                    AdviceReason::TimeUnused {
                        elapsed_s: s.elapsed_s,
                        limit_s: limit,
                        margin_pct: cfg.time_margin_pct,
                    },
                ));
            }
        }
    }
    // Nodes.
    if let Some(sc) = sc {
        let n = s.alloc.nodes.max(s.nodes.len() as u32);
        if n > 1 && !sc.underused_nodes.is_empty() && s.missing_nodes.is_empty() {
            let busy = n as usize - sc.underused_nodes.len();
            out.push(Advice::new(
                Some(Request::Nodes(busy.max(1) as u32)),
                AdviceReason::NodesUnderused {
                    nodes: sc.underused_nodes.clone(),
                    nodes_allocated: n,
                },
            ));
        }
    }
    out
}

/// GPUs: waste, the GPU-bound/GPU-idle class, findings and advice, from every node's GPU summaries.
fn add_gpus(s: &JobSummary, a: &mut Analysis) {
    let gpus: Vec<crate::gpu::GpuSummary> = s
        .nodes
        .iter()
        .flat_map(|n| n.gpus.iter().cloned())
        .collect();
    if gpus.is_empty() {
        return;
    }
    use crate::gpu::summary::GpuClass;
    let idle = gpus
        .iter()
        .filter(|g| g.never_used || g.classification == Some(GpuClass::GpuIdle))
        .count();
    let bound = gpus
        .iter()
        .filter(|g| g.classification == Some(GpuClass::GpuBound))
        .count();
    a.classification.evidence.gpus = gpus
        .iter()
        .map(|g| GpuUse {
            gpu: GpuRef::of(g),
            // The job's own share on a GPU others used too (docs/gpu.md): the figure its
            // GPU class rests on.
            util_mean_pct: g.job_util_mean_pct.or(g.util_mean_pct),
        })
        .collect();
    a.classification.evidence.gpus_idle = idle as u32;
    if a.classification.class == JobClass::InsufficientData {
        // No CPU/memory data: the GPUs alone do not make a class.
    } else if idle == gpus.len() {
        a.classification.class = JobClass::GpuIdle;
    } else if bound > 0
        && (bound * 2 >= gpus.len()
            || matches!(a.classification.class, JobClass::Idle | JobClass::Mixed))
    {
        a.classification.class = JobClass::GpuBound;
    }
    for g in &gpus {
        for f in &g.findings {
            a.anomalies.push(Finding {
                severity: if g.never_used || g.lost {
                    Severity::Warning
                } else {
                    Severity::Info
                },
                what: FindingKind::Gpu {
                    gpu: GpuRef::of(g),
                    finding: f.clone(),
                },
            });
        }
    }
    for x in crate::gpu::gpu_advice(&gpus) {
        // "Request k GPUs instead of n" is a resubmit-ready option; the rest are not.
        let request = match &x {
            GpuAdvice::FewerGpus { keep, .. } => Some(Request::GresGpu(*keep)),
            _ => None,
        };
        a.advice
            .push(Advice::new(request, AdviceReason::Gpu { advice: x }));
    }
}

/// SLURM's `--mem-update` measures the job's "RSS" through jobacct_gather/cgroup: on cgroup v1
/// memory.stat's `total_rss` (anonymous memory only: shmem/tmpfs is page cache there), on cgroup
/// v2 `memory.current` less the file LRU lists (anonymous memory and shmem, which is swap-backed
/// and sits on the anonymous lists; page cache is left out). The cut holds where what it counts
/// was at least this share of the peak (percent).
pub const MEM_UPDATE_COUNTED_SHARE_PCT: f64 = 80.0;
/// On cgroup v1, from this share of the peak (percent), shmem/tmpfs makes `--mem-update` unsafe:
/// charged to the limit, left out of `total_rss`, and not reclaimable without swap.
pub const MEM_UPDATE_SHMEM_SHARE_PCT: f64 = 20.0;
/// SLURM keeps the delay in minutes in 16 bits.
const MEM_UPDATE_MAX_DELAY_MIN: u64 = u16::MAX as u64;

/// Where the release has `sbatch --mem-update` (`features`, from the SLURM adapter) and the job
/// asked for much more memory than it used (the [`AdviceReason::MemoryUnused`] condition): a
/// suggestion to let SLURM lower the limit when what SLURM's RSS counts was most of the peak, a
/// warning when shmem/tmpfs was a large share of it where that RSS leaves shmem out (cgroup v1,
/// and wherever the cgroup version is not known to be v2 on every node). Nothing when the peak's
/// make-up was not measured, the job was OOM-killed or ran too short, or no moment was found
/// after which a cut would have held on every node.
pub fn mem_update_advice(
    s: &JobSummary,
    cfg: &Report,
    features: crate::job::SchedulerFeatures,
) -> Option<Advice> {
    if !features.mem_update
        || s.elapsed_s < cfg.min_elapsed_for_advice_s as f64
        || s.mem.oom_kill_events.unwrap_or(0) > 0
        || s.nodes.is_empty()
    {
        return None;
    }
    let (peak, req) = (s.mem.peak_bytes?, s.alloc.mem_per_node_bytes?);
    if peak == 0 || 100.0 * peak as f64 / req as f64 >= cfg.mem_efficiency_warn_pct {
        return None;
    }
    let (anon, shmem) = (s.mem.rss_peak_bytes?, s.mem.shmem_peak_bytes?);
    let share = |b: u64| 100.0 * b as f64 / peak as f64;
    let v2 = s
        .nodes
        .iter()
        .all(|n| n.cgroup_version == Some(crate::sample::CgroupVersion::V2));
    if !v2 && share(shmem) >= MEM_UPDATE_SHMEM_SHARE_PCT {
        return Some(Advice::new(
            None,
            AdviceReason::MemUpdateUnsafe {
                peak_bytes: peak,
                shmem_peak_bytes: shmem,
            },
        ));
    }
    // The two peaks need not coincide: their sum is at most what was counted at once.
    let counted = if v2 { anon.saturating_add(shmem) } else { anon }.min(peak);
    if share(counted) < MEM_UPDATE_COUNTED_SHARE_PCT {
        return None;
    }
    let margin = cfg.mem_headroom_pct.max(0.0);
    let mut delay_s: f64 = 0.0;
    for n in &s.nodes {
        delay_s = delay_s.max(safe_cut_s(n, margin)?);
    }
    // SLURM takes whole minutes; at least one, so the job has started.
    let delay_min = ((delay_s / 60.0).ceil() as u64).max(1);
    if (delay_min * 60) as f64 >= s.elapsed_s || delay_min > MEM_UPDATE_MAX_DELAY_MIN {
        return None;
    }
    Some(Advice::new(
        Some(Request::MemUpdate {
            // SLURM refuses a margin of 0.
            margin_pct: (margin.round() as u32).max(1),
            delay_min,
        }),
        AdviceReason::MemUpdate {
            peak_bytes: peak,
            counted_peak_bytes: counted,
            delay_s: delay_min * 60,
            margin_pct: margin,
        },
    ))
}

/// The earliest time on a node's timeline from which a cut to "memory in use + `margin_pct` %"
/// would hold at every later sample: each sample from there on, raised by the margin, covers the
/// highest memory seen from it to the end (`mem_bytes_max`, which survives thinning). Any cut in
/// that stretch holds, so rounding the delay up stays safe. `None`: a sample lacks memory, or no
/// such stretch exists.
fn safe_cut_s(n: &NodeSummary, margin_pct: f64) -> Option<f64> {
    let raise = 1.0 + margin_pct / 100.0;
    let mut highest_after: u64 = 0;
    let mut from = None;
    for p in n.timeline.iter().rev() {
        let now = p.mem_bytes?;
        highest_after = highest_after.max(p.mem_bytes_max.unwrap_or(now));
        if now as f64 * raise < highest_after as f64 {
            break;
        }
        from = Some(p.t_s);
    }
    from
}

/// No samples and no counters: nothing can be said about the job's use.
pub fn has_no_data(s: &JobSummary) -> bool {
    s.samples == 0 || (s.cpu.usage_s.is_none() && s.mem.peak_bytes.is_none())
}

pub fn analyze(s: &JobSummary, cfg: &Report) -> Analysis {
    if has_no_data(s) {
        let mut a = Analysis {
            waste: waste(s),
            classification: Classification {
                class: JobClass::InsufficientData,
                evidence: Evidence::default(),
            },
            advice_withheld: Some(AdviceWithheld::NoData),
            insufficient_data: true,
            ..Default::default()
        };
        // The end state is SLURM's word, not a sample: a timeout is still a finding.
        a.anomalies = anomalies(s, cfg)
            .into_iter()
            .filter(|f| matches!(f.what, FindingKind::Timeout { .. }))
            .collect();
        add_gpus(s, &mut a);
        return a;
    }
    let sc = scalability(s);
    let mut a = Analysis {
        waste: waste(s),
        classification: classify(s, sc.as_ref(), cfg),
        anomalies: anomalies(s, cfg),
        advice: advice(s, sc.as_ref(), cfg),
        scalability: sc,
        advice_withheld: (s.elapsed_s < cfg.min_elapsed_for_advice_s as f64).then_some(
            AdviceWithheld::ShortJob {
                elapsed_s: s.elapsed_s,
                min_s: cfg.min_elapsed_for_advice_s,
            },
        ),
        insufficient_data: false,
        peers: Vec::new(),
        history: None,
    };
    add_gpus(s, &mut a);
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::summary::*;

    #[test]
    fn archived_class_names_are_unchanged_and_both_spellings_parse() {
        // The names archived documents and the audit's `class` column hold (new classes are added,
        // none renamed: network_bound and waiting came with the kernel view).
        let archived = r#"["cpu_bound","memory_bound","io_bound","idle","mixed","gpu_bound","gpu_idle","network_bound","waiting","insufficient_data"]"#;
        assert_eq!(serde_json::to_string(&JobClass::ALL).unwrap(), archived);
        use crate::vocab::Vocabulary;
        for (typed, class) in [
            ("cpu_bound", JobClass::CpuBound),
            ("cpu-bound", JobClass::CpuBound),
            ("GPU-idle", JobClass::GpuIdle),
            ("unknown", JobClass::InsufficientData),
            ("insufficient-data", JobClass::InsufficientData),
        ] {
            assert_eq!(JobClass::parse(typed), Some(class), "{typed}");
        }
        assert_eq!(JobClass::parse("nope"), None);
        assert_eq!(JobClass::parse("cpubound"), None);
    }

    fn node(
        name: &str,
        elapsed: f64,
        busy: impl Fn(f64) -> f64,
        mem: impl Fn(f64) -> u64,
    ) -> NodeSummary {
        let n = 60;
        let timeline: Vec<Point> = (1..=n)
            .map(|i| {
                let t = elapsed * i as f64 / n as f64;
                Point {
                    t_s: t,
                    busy_cores: Some(busy(t)),
                    busy_cores_max: Some(busy(t)),
                    mem_bytes: Some(mem(t)),
                    mem_bytes_max: Some(mem(t)),
                    io_bytes_per_s: None,
                    tasks: Some(1),
                    cpu_wait_pct: None,
                    runnable_threads: None,
                }
            })
            .collect();
        let cpu: f64 = timeline
            .iter()
            .map(|p| p.busy_cores.unwrap() * elapsed / n as f64)
            .sum();
        NodeSummary {
            node: name.into(),
            job_id: 1,
            uid: 1000,
            end_unix_ms: (elapsed * 1000.0) as u64,
            elapsed_s: elapsed,
            alloc_cores: Some(2),
            alloc_mem_bytes: Some(4 << 30),
            cgroup_version: Some(crate::sample::CgroupVersion::V1),
            cpu: CpuTotals {
                usage_s: Some(cpu),
                ..Default::default()
            },
            mem: MemTotals {
                peak_bytes: timeline.iter().filter_map(|p| p.mem_bytes_max).max(),
                limit_bytes: Some(4 << 30),
                ..Default::default()
            },
            tasks_max: Some(1),
            timeline,
            quality: Quality {
                samples: 60,
                sampler_ended_cleanly: true,
                final_counters: true,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn job(nodes: Vec<NodeSummary>, time_limit_s: Option<u64>) -> JobSummary {
        let elapsed = nodes[0].elapsed_s;
        let cores: u32 = nodes.iter().filter_map(|n| n.alloc_cores).sum();
        let cpu: f64 = nodes.iter().filter_map(|n| n.cpu.usage_s).sum();
        let peak = nodes.iter().filter_map(|n| n.mem.peak_bytes).max();
        JobSummary {
            schema_version: SCHEMA_VERSION,
            generator: "t".into(),
            cluster: None,
            job_id: 1,
            array_job_id: None,
            array_task_id: None,
            name: None,
            user: None,
            uid: Some(1000),
            gid: None,
            group: None,

            account: None,
            partition: None,
            qos: None,
            submit_unix_s: None,
            state: "COMPLETED".into(),
            end_reason: None,
            exit_code: Some(0),
            start_unix_ms: 0,
            end_unix_ms: (elapsed * 1000.0) as u64,
            elapsed_s: elapsed,
            scheduler_start_unix_s: None,
            alloc: Allocation {
                nodes: nodes.len() as u32,
                cores: Some(cores),
                mem_per_node_bytes: Some(4 << 30),
                gpus: None,
                time_limit_s,
            },
            cpu: CpuTotals {
                usage_s: Some(cpu),
                ..Default::default()
            },
            mem: MemTotals {
                peak_bytes: peak,
                ..Default::default()
            },
            io: IoTotals::default(),
            pressure: None,
            kernel: None,
            script_sha256: None,
            efficiency: Efficiency {
                cpu_pct: Some(100.0 * cpu / (cores as f64 * elapsed)),
                mem_pct: peak.map(|p| 100.0 * p as f64 / (4u64 << 30) as f64),
                time_pct: time_limit_s.map(|l| 100.0 * elapsed / l as f64),
            },
            nodes,
            missing_nodes: vec![],
            partial: false,
            partial_reasons: vec![],
            samples: 60,
            user_options: Default::default(),
            analysis: None,
        }
    }

    const MIB: u64 = 1024 * 1024;

    #[test]
    fn serial_job_gets_serial_verdict_and_one_core_advice() {
        let s = job(vec![node("a", 1200.0, |_| 1.0, |_| 3 << 30)], None);
        let a = analyze(&s, &Report::default());
        let sc = a.scalability.as_ref().unwrap();
        assert_eq!(sc.verdict, Verdict::Serial);
        assert_eq!(sc.share_time_at_most_one_core_pct, 100.0);
        assert_eq!(sc.amdahl_speedup_ceiling, Some(1.0));
        assert!(
            a.advice
                .iter()
                .any(|x| x.request == Some(Request::CpusPerTask(1))
                    && x.sbatch.as_deref() == Some("#SBATCH --cpus-per-task=1")
                    && matches!(x.reason, AdviceReason::Serial { cores: 2, .. })),
            "{:?}",
            a.advice
        );
        assert!((a.waste.core_hours_wasted.unwrap() - 1200.0 / 3600.0).abs() < 1e-6);
    }

    /// Two nodes of 1 h, 4 GiB requested each. The expectations are hand-computed: 8 GiB-h
    /// allocated; with peaks of 1 and 3 GiB, 4 GiB-h needed and 4 unused; with a peak missing
    /// anywhere, needed and unused are unknown, not "the whole allocation unused".
    #[test]
    fn memory_waste_is_unknown_unless_every_node_has_a_peak() {
        let two = |p1: Option<u64>, p2: Option<u64>| {
            let mut a = node("a", 3600.0, |_| 1.0, |_| 1 << 30);
            let mut b = node("b", 3600.0, |_| 1.0, |_| 1 << 30);
            a.mem.peak_bytes = p1;
            b.mem.peak_bytes = p2;
            waste(&job(vec![a, b], None))
        };
        let w = two(Some(1 << 30), Some(3 << 30));
        assert_eq!(w.mem_gb_hours_allocated, Some(8.0));
        assert_eq!(w.mem_gb_hours_needed, Some(4.0));
        assert_eq!(w.mem_gb_hours_wasted, Some(4.0));
        for w in [two(Some(1 << 30), None), two(None, None)] {
            assert_eq!(w.mem_gb_hours_allocated, Some(8.0));
            assert_eq!((w.mem_gb_hours_needed, w.mem_gb_hours_wasted), (None, None));
        }
        // The CPU figures do not depend on the memory peak: 2 nodes × 2 cores × 1 h allocated,
        // one busy core on each for the hour used.
        let w = two(None, None);
        assert_eq!(w.core_hours_allocated, Some(4.0));
        assert_eq!(w.core_hours_used, Some(2.0));
        assert_eq!(w.core_hours_wasted, Some(2.0));
    }

    #[test]
    fn parallel_job_gets_no_cpu_advice() {
        let s = job(vec![node("a", 1200.0, |_| 2.0, |_| 3 << 30)], None);
        let a = analyze(&s, &Report::default());
        assert_eq!(a.scalability.as_ref().unwrap().verdict, Verdict::Parallel);
        assert!(
            !a.advice
                .iter()
                .any(|x| matches!(x.request, Some(Request::CpusPerTask(_)))),
            "{:?}",
            a.advice
        );
        assert_eq!(a.classification.class, JobClass::CpuBound);
    }

    #[test]
    fn the_kernel_view_makes_waiting_and_lock_findings_with_their_numbers() {
        let kernel = |run_s: f64, wait_s: f64, sync: u64, file: u64| crate::summary::KernelTotals {
            run_s: Some(run_s),
            cpu_wait_s: Some(wait_s),
            syscalls: Some(crate::summary::SyscallCounts {
                sync,
                file,
                ..Default::default()
            }),
            small_reads: Some(2_100_000),
            small_writes: Some(0),
            ..Default::default()
        };
        // 4 threads on 2 cores: each waits half its runnable time.
        let mut n = node("a", 1200.0, |_| 2.0, |_| 3 << 30);
        n.threads_max = Some(4);
        n.kernel = Some(kernel(2400.0, 2400.0, 620_000, 380_000));
        let mut s = job(vec![n], None);
        s.kernel =
            crate::summary::KernelTotals::sum(s.nodes.iter().filter_map(|n| n.kernel.as_ref()));
        let cfg = Report::default();
        let a = analyze(&s, &cfg);
        assert_eq!(a.classification.class, JobClass::Waiting);
        assert_eq!(a.classification.evidence.cpu_wait_pct, Some(50.0));
        let kinds: Vec<&FindingKind> = a.anomalies.iter().map(|f| &f.what).collect();
        assert!(kinds.iter().any(|k| matches!(k, FindingKind::CpuWait { wait_pct, threads_max: Some(4), .. } if *wait_pct == 50.0)), "{kinds:?}");
        assert!(kinds.iter().any(|k| matches!(k, FindingKind::LockContention { pct, sync_calls: 620_000, calls: 1_000_000 } if (*pct - 62.0).abs() < 1e-9)), "{kinds:?}");
        assert!(
            kinds.iter().any(|k| matches!(
                k,
                FindingKind::SmallIo {
                    small_reads: 2_100_000,
                    ..
                }
            )),
            "{kinds:?}"
        );
        // Below the thresholds: no finding, the class from CPU and memory as before.
        let mut n = node("a", 1200.0, |_| 2.0, |_| 3 << 30);
        n.kernel = Some(kernel(2400.0, 100.0, 10, 1_000));
        let mut s = job(vec![n], None);
        s.kernel = n_kernel(&s);
        let a = analyze(&s, &cfg);
        assert_eq!(a.classification.class, JobClass::CpuBound);
        assert!(!a.anomalies.iter().any(|f| matches!(
            f.what,
            FindingKind::CpuWait { .. } | FindingKind::LockContention { .. }
        )));
    }

    fn n_kernel(s: &JobSummary) -> Option<crate::summary::KernelTotals> {
        crate::summary::KernelTotals::sum(s.nodes.iter().filter_map(|n| n.kernel.as_ref()))
    }

    #[test]
    fn over_requested_memory_gets_mem_advice_with_headroom() {
        let s = job(vec![node("a", 1200.0, |_| 2.0, |_| 300 * MIB)], None);
        let a = analyze(&s, &Report::default());
        // 300 MiB × 1.25 = 375 MiB → rounded up to 400M
        let m = a
            .advice
            .iter()
            .find(|x| matches!(x.request, Some(Request::MemMib(_))))
            .expect("mem advice");
        assert_eq!(m.request, Some(Request::MemMib(400)));
        assert_eq!(m.sbatch.as_deref(), Some("#SBATCH --mem=400M"));
        assert!(
            matches!(m.reason, AdviceReason::MemoryUnused { peak_bytes, request_bytes, .. }
                if peak_bytes == 300 * MIB && request_bytes == 4 << 30),
            "{:?}",
            m.reason
        );
    }

    #[test]
    fn well_used_job_gets_no_advice() {
        let s = job(vec![node("a", 1200.0, |_| 2.0, |_| 3500 * MIB)], Some(1500));
        let a = analyze(&s, &Report::default());
        assert!(a.advice.is_empty(), "{:?}", a.advice);
        assert_eq!(a.advice_withheld, None);
        assert!(!a.insufficient_data);
    }

    #[test]
    fn short_time_use_gets_time_advice() {
        let s = job(
            vec![node("a", 1200.0, |_| 2.0, |_| 3500 * MIB)],
            Some(36_000),
        );
        let a = analyze(&s, &Report::default());
        // 20 min × 1.3 = 26 min → 30 min
        assert!(
            a.advice
                .iter()
                .any(|x| x.request == Some(Request::TimeS(1800))
                    && x.sbatch.as_deref() == Some("#SBATCH --time=00:30:00")),
            "{:?}",
            a.advice
        );
    }

    #[test]
    fn leak_and_busy_then_idle_are_found() {
        let s = job(
            vec![node(
                "a",
                7200.0,
                |t| if t < 3000.0 { 2.0 } else { 0.0 },
                |t| (200.0 * MIB as f64 + t * 200_000.0) as u64,
            )],
            None,
        );
        let a = analyze(&s, &Report::default());
        let leak = a
            .anomalies
            .iter()
            .find_map(|f| match f.what {
                FindingKind::MemoryLeak {
                    slope_bytes_per_s,
                    r2,
                    ..
                } => Some((slope_bytes_per_s, r2)),
                _ => None,
            })
            .expect("leak found");
        // 200 000 B/s by construction, a perfect line
        assert!((leak.0 - 200_000.0).abs() < 1_000.0, "{leak:?}");
        assert!(leak.1 > 0.99, "{leak:?}");
        let idle = a
            .anomalies
            .iter()
            .find_map(|f| match f.what {
                FindingKind::BusyThenIdle { busy_s, idle_s, .. } => Some((busy_s, idle_s)),
                _ => None,
            })
            .expect("busy then idle found");
        // busy until 3000 s of 7200 s (timeline points every 120 s)
        assert!((idle.0 - 3000.0).abs() <= 120.0, "{idle:?}");
        assert!((idle.0 + idle.1 - 7200.0).abs() < 1e-6, "{idle:?}");
    }

    #[test]
    fn idle_job_is_classified_idle() {
        let s = job(vec![node("a", 1200.0, |_| 0.0, |_| 10 * MIB)], None);
        let a = analyze(&s, &Report::default());
        assert_eq!(a.classification.class, JobClass::Idle);
        assert_eq!(a.scalability.unwrap().verdict, Verdict::Idle);
    }

    #[test]
    fn two_node_imbalance_names_the_idle_node() {
        let s = job(
            vec![
                node("n1", 1200.0, |_| 2.0, |_| MIB << 10),
                node("n2", 1200.0, |_| 0.0, |_| 5 * MIB),
            ],
            None,
        );
        let a = analyze(&s, &Report::default());
        let sc = a.scalability.unwrap();
        assert_eq!(sc.underused_nodes, vec!["n2"]);
        assert_eq!(sc.nodes_allocated, 2);
        assert!(
            a.advice.iter().any(|x| x.request == Some(Request::Nodes(1))
                && x.reason
                    == AdviceReason::NodesUnderused {
                        nodes: vec!["n2".into()],
                        nodes_allocated: 2
                    }),
            "{:?}",
            a.advice
        );
    }

    #[test]
    fn oom_is_critical_and_advises_more_memory() {
        let mut n = node("a", 300.0, |_| 1.0, |_| 4 << 30);
        n.mem.oom_kill_events = Some(1);
        let mut s = job(vec![n], None);
        s.mem.oom_kill_events = Some(1);
        s.state = crate::job::JobState::OutOfMemory;
        let a = analyze(&s, &Report::default());
        assert!(a.anomalies.iter().any(|f| f.severity == Severity::Critical
            && f.what
                == FindingKind::Oom {
                    node: "a".into(),
                    kills: 1
                }));
        assert!(
            a.advice
                .iter()
                .any(|x| x.request == Some(Request::MemMib(8192))
                    && x.sbatch.as_deref() == Some("#SBATCH --mem=8G")),
            "{:?}",
            a.advice
        );
        assert_eq!(a.classification.class, JobClass::MemoryBound);
    }

    #[test]
    fn flags() {
        assert_eq!(mem_flag(375.0 * MIB as f64), "400M");
        assert_eq!(mem_flag(1.2 * 1024.0 * MIB as f64), "2G");
        assert_eq!(time_flag(61.0), "00:05:00");
        assert_eq!(time_flag(90_000.0), "1-01:00:00");
    }

    #[test]
    fn amdahl_from_mixed_phases() {
        // half the time at 1 core, half at 4 cores: serial work 0.5 / (0.5 + 2.0) = 0.2 → ceiling 5×
        let mut n = node("a", 1200.0, |t| if t <= 600.0 { 1.0 } else { 4.0 }, |_| MIB);
        n.alloc_cores = Some(4);
        let s = job(vec![n], None);
        let sc = scalability(&s).unwrap();
        assert!(
            (sc.amdahl_speedup_ceiling.unwrap() - 5.0).abs() < 0.3,
            "{:?}",
            sc.amdahl_speedup_ceiling
        );
        assert!((sc.share_time_at_most_one_core_pct - 50.0).abs() < 3.0);
    }

    #[test]
    fn one_core_job_is_single_core_not_parallel() {
        let mut n = node("a", 1200.0, |_| 1.0, |_| 3 << 30);
        n.alloc_cores = Some(1);
        let s = job(vec![n], None);
        let a = analyze(&s, &Report::default());
        assert_eq!(a.scalability.unwrap().verdict, Verdict::SingleCore);
        assert!(!a
            .advice
            .iter()
            .any(|x| matches!(x.request, Some(Request::CpusPerTask(_)))));
    }

    #[test]
    fn short_job_says_advice_was_withheld() {
        // 35 s at 4 % of 16 cores: advice needs 60 s, so none, and the reason is recorded.
        let mut n = node("a", 35.0, |_| 0.64, |_| 100 * MIB);
        n.alloc_cores = Some(16);
        let s = job(vec![n], Some(3600));
        let a = analyze(&s, &Report::default());
        assert!(a.advice.is_empty(), "{:?}", a.advice);
        assert_eq!(
            a.advice_withheld,
            Some(AdviceWithheld::ShortJob {
                elapsed_s: 35.0,
                min_s: 60
            })
        );
    }

    #[test]
    fn no_samples_claims_nothing() {
        let mut s = job(vec![node("a", 1200.0, |_| 1.0, |_| MIB)], Some(3600));
        s.samples = 0;
        s.nodes[0].timeline.clear();
        let a = analyze(&s, &Report::default());
        assert!(a.insufficient_data);
        assert_eq!(a.classification.class, JobClass::InsufficientData);
        assert_eq!(a.scalability, None);
        assert!(a.advice.is_empty() && a.anomalies.is_empty());
        assert_eq!(a.advice_withheld, Some(AdviceWithheld::NoData));
    }

    #[test]
    fn timeout_advice_keeps_the_exact_limit() {
        let mut s = job(vec![node("a", 60.0, |_| 2.0, |_| 3500 * MIB)], Some(60));
        s.state = "TIMEOUT".into();
        let a = analyze(&s, &Report::default());
        let t = a
            .advice
            .iter()
            .find(|x| matches!(x.request, Some(Request::TimeS(_))))
            .expect("time advice");
        assert_eq!(t.reason, AdviceReason::TimedOut { limit_s: 60 });
        // doubled (120 s), rounded up to 5 minutes
        assert_eq!(t.request, Some(Request::TimeS(300)));
        assert!(a
            .anomalies
            .iter()
            .any(|f| f.what == FindingKind::Timeout { limit_s: Some(60) }));
        assert_eq!(slurm_time(60), "00:01:00");
        assert_eq!(slurm_time(90_061), "1-01:01:01");
    }

    #[test]
    fn archived_enums_keep_their_strings() {
        let s = job(vec![node("a", 1200.0, |_| 1.0, |_| 3 << 30)], None);
        let a = analyze(&s, &Report::default());
        let v = serde_json::to_value(&a).unwrap();
        assert_eq!(v["scalability"]["verdict"], "serial");
        assert_eq!(v["classification"]["class"], "mixed");
        let adv = &v["advice"][0];
        assert_eq!(adv["sbatch"], "#SBATCH --cpus-per-task=1");
        assert_eq!(adv["request"]["option"], "cpus_per_task");
        assert_eq!(adv["reason"]["kind"], "serial");
        let f = serde_json::to_value(Finding {
            severity: Severity::Warning,
            what: FindingKind::NearOom {
                node: "a".into(),
                peak_bytes: 9,
                limit_bytes: 10,
                pct: 90.0,
            },
        })
        .unwrap();
        assert_eq!(f["kind"], "near_oom");
        assert_eq!(f["severity"], "warning");
        let back: Analysis = serde_json::from_value(v).unwrap();
        assert_eq!(back, a);
        // A version-1 analysis (sentences) does not fail the document: it reads as absent.
        #[derive(Deserialize)]
        struct Doc {
            #[serde(default, deserialize_with = "deserialize_lenient")]
            analysis: Option<Analysis>,
        }
        let v1 = r#"{"analysis":{"waste":{},"scalability":null,"classification":{"class":"mixed","evidence":["CPU efficiency 3 %"]},"anomalies":[{"kind":"oom","severity":"critical","message":"x"}],"advice":[],"memory_accounting":"SLURM enforces"}}"#;
        assert_eq!(serde_json::from_str::<Doc>(v1).unwrap().analysis, None);
    }

    /// `--mem-update` (SLURM 26.05): figures chosen by hand on a 4 GiB request, one node, 60
    /// samples over an hour (one a minute), the default 25 % headroom.
    mod mem_update {
        use super::*;
        use crate::job::SchedulerFeatures;

        const GIB: u64 = 1 << 30;
        const ON: SchedulerFeatures = SchedulerFeatures { mem_update: true };

        /// 512 MiB for the first quarter hour, then 1 GiB to the end; anon and shmem peaks given.
        fn stepped(anon: Option<u64>, shmem: Option<u64>) -> JobSummary {
            let mut s = job(
                vec![node(
                    "a",
                    3600.0,
                    |_| 1.0,
                    |t| {
                        if t < 900.0 {
                            512 * MIB
                        } else {
                            GIB
                        }
                    },
                )],
                None,
            );
            s.mem.rss_peak_bytes = anon;
            s.mem.shmem_peak_bytes = shmem;
            s
        }

        #[test]
        fn a_mostly_anonymous_peak_gets_the_option_after_its_last_rise() {
            // 0.9 GiB of the 1 GiB peak anonymous (90 %), 10 MiB shmem (1 %). 512 MiB + 25 % =
            // 640 MiB would not hold the later 1 GiB: the cut is safe from 15 min on.
            let s = stepped(Some(GIB * 9 / 10), Some(10 * MIB));
            let a = mem_update_advice(&s, &Report::default(), ON).unwrap();
            assert_eq!(
                a.request,
                Some(Request::MemUpdate {
                    margin_pct: 25,
                    delay_min: 15
                })
            );
            assert_eq!(a.sbatch.as_deref(), Some("#SBATCH --mem-update=25@15"));
            assert_eq!(
                a.reason,
                AdviceReason::MemUpdate {
                    peak_bytes: GIB,
                    counted_peak_bytes: GIB * 9 / 10,
                    delay_s: 900,
                    margin_pct: 25.0
                }
            );
            // The archive's spelling, for scripts.
            let v = serde_json::to_value(&a).unwrap();
            assert_eq!(v["request"]["option"], "mem_update");
            assert_eq!(v["request"]["value"]["delay_min"], 15);
            assert_eq!(v["reason"]["kind"], "mem_update");
        }

        #[test]
        fn a_large_shmem_share_gets_a_warning_and_no_option() {
            // 300 MiB of the 1 GiB peak in shmem/tmpfs (29 %): RSS leaves it out.
            let s = stepped(Some(GIB * 7 / 10), Some(300 * MIB));
            let a = mem_update_advice(&s, &Report::default(), ON).unwrap();
            assert_eq!(a.request, None);
            assert_eq!(a.sbatch, None);
            assert_eq!(
                a.reason,
                AdviceReason::MemUpdateUnsafe {
                    peak_bytes: GIB,
                    shmem_peak_bytes: 300 * MIB
                }
            );
        }

        #[test]
        fn nothing_without_the_release_or_the_evidence() {
            let good = stepped(Some(GIB * 9 / 10), Some(10 * MIB));
            // 24.11 and older: no such option.
            assert_eq!(
                mem_update_advice(&good, &Report::default(), SchedulerFeatures::default()),
                None
            );
            // The peak's make-up not measured: neither a suggestion nor a warning.
            for (anon, shmem) in [(None, Some(10 * MIB)), (Some(GIB * 9 / 10), None)] {
                let s = stepped(anon, shmem);
                assert_eq!(mem_update_advice(&s, &Report::default(), ON), None);
            }
            // Mostly page cache (anon 50 %, shmem 5 %): RSS says too little to cut by.
            let cache = stepped(Some(GIB / 2), Some(GIB / 20));
            assert_eq!(mem_update_advice(&cache, &Report::default(), ON), None);
            // OOM-killed: the need is unknown.
            let mut oom = good.clone();
            oom.mem.oom_kill_events = Some(1);
            assert_eq!(mem_update_advice(&oom, &Report::default(), ON), None);
            // Memory well used: 1 GiB of a 1.5 GiB request (67 % ≥ 50 %).
            let mut used = good.clone();
            used.alloc.mem_per_node_bytes = Some(GIB * 3 / 2);
            assert_eq!(mem_update_advice(&used, &Report::default(), ON), None);
        }

        /// On cgroup v2 SLURM's RSS is memory.current less the file LRU lists: shmem counts, so
        /// the figures that warn on v1 get the option, and page cache still does not count.
        #[test]
        fn on_cgroup_v2_shmem_counts_and_page_cache_does_not() {
            let v2 = |mut s: JobSummary| {
                for n in &mut s.nodes {
                    n.cgroup_version = Some(crate::sample::CgroupVersion::V2);
                }
                s
            };
            // 0.7 GiB anonymous + 300 MiB shmem of the 1 GiB peak: 0.99 GiB counted.
            let s = v2(stepped(Some(GIB * 7 / 10), Some(300 * MIB)));
            let a = mem_update_advice(&s, &Report::default(), ON).unwrap();
            assert_eq!(a.sbatch.as_deref(), Some("#SBATCH --mem-update=25@15"));
            assert!(
                matches!(a.reason, AdviceReason::MemUpdate { counted_peak_bytes, .. }
                    if counted_peak_bytes == GIB * 7 / 10 + 300 * MIB),
                "{:?}",
                a.reason
            );
            // Half anonymous, 5 % shmem: 55 % counted, the rest page cache.
            let cache = v2(stepped(Some(GIB / 2), Some(GIB / 20)));
            assert_eq!(mem_update_advice(&cache, &Report::default(), ON), None);
            // One node of two not known to be v2: v1's rule, the warning.
            let mut mixed = v2(stepped(Some(GIB * 7 / 10), Some(300 * MIB)));
            let mut other = mixed.nodes[0].clone();
            other.node = "b".into();
            other.cgroup_version = None;
            mixed.nodes.push(other);
            assert!(matches!(
                mem_update_advice(&mixed, &Report::default(), ON).map(|a| a.reason),
                Some(AdviceReason::MemUpdateUnsafe { .. })
            ));
        }

        /// SLURM refuses `--mem-update=0@…`: a site's 0 % headroom still suggests 1 %.
        #[test]
        fn the_margin_is_at_least_one_percent() {
            let s = stepped(Some(GIB * 9 / 10), Some(10 * MIB));
            let cfg = Report {
                mem_headroom_pct: 0.0,
                ..Report::default()
            };
            // With no margin the cut is safe only once memory stays flat: from 15 min on.
            let a = mem_update_advice(&s, &cfg, ON).unwrap();
            assert_eq!(a.sbatch.as_deref(), Some("#SBATCH --mem-update=1@15"));
        }

        #[test]
        fn no_option_when_memory_rises_at_the_end() {
            // 512 MiB for 59 minutes, 1.5 GiB in the last sample: only the last sample is safe,
            // a cut at the job's end helps nothing.
            let mut s = job(
                vec![node(
                    "a",
                    3600.0,
                    |_| 1.0,
                    |t| {
                        if t < 3600.0 {
                            512 * MIB
                        } else {
                            GIB * 3 / 2
                        }
                    },
                )],
                None,
            );
            s.mem.rss_peak_bytes = Some(GIB * 3 / 2);
            s.mem.shmem_peak_bytes = Some(0);
            assert_eq!(mem_update_advice(&s, &Report::default(), ON), None);
        }

        #[test]
        fn every_node_must_hold_the_cut() {
            // Node a is safe from 15 min; node b rises to 1 GiB only at 40 min.
            let b = node(
                "b",
                3600.0,
                |_| 1.0,
                |t| {
                    if t < 2400.0 {
                        256 * MIB
                    } else {
                        GIB
                    }
                },
            );
            let mut s = stepped(Some(GIB * 9 / 10), Some(10 * MIB));
            s.nodes.push(b);
            let a = mem_update_advice(&s, &Report::default(), ON).unwrap();
            assert_eq!(
                a.request,
                Some(Request::MemUpdate {
                    margin_pct: 25,
                    delay_min: 40
                })
            );
        }
    }
}
