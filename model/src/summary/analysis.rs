//! Report-level analysis of a [`JobSummary`]: waste, scalability verdict, classification, anomalies
//! and resubmit-ready `#SBATCH` advice. Pure. Every statement carries the numbers it rests on.
//!
//! Thresholds come from [`crate::params::Report`] (documented in docs/configuration.md).

use super::{JobSummary, NodeSummary, Point};
use crate::params::Report;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Analysis {
    pub waste: Waste,
    pub scalability: Option<Scalability>,
    pub classification: Classification,
    pub anomalies: Vec<Finding>,
    pub advice: Vec<Advice>,
    /// Which memory figure SLURM enforces its limit on, in words.
    pub memory_accounting: String,
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Scalability {
    /// `serial`, `parallel`, `partially_parallel`, `idle`.
    pub verdict: String,
    /// One sentence with the numbers, e.g. "used 1.0 of 8 cores for 92 % of the time: …".
    pub statement: String,
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
    /// Largest node CPU time ÷ mean node CPU time (1.0 = balanced).
    pub imbalance_max_over_mean: Option<f64>,
    /// Nodes that used less than a quarter of the mean node's CPU time.
    pub underused_nodes: Vec<String>,
    pub imbalance_statement: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Classification {
    /// `cpu_bound`, `memory_bound`, `io_bound`, `idle`, `mixed` (`gpu_bound`, `gpu_idle` with GPUs).
    pub class: String,
    pub evidence: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Finding {
    /// `memory_leak`, `idle_phase`, `busy_then_idle`, `near_oom`, `oom`, `timeout`.
    pub kind: String,
    /// `info`, `warning`, `critical`.
    pub severity: String,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Advice {
    /// A line to paste into the job script, e.g. `#SBATCH --mem=2G`.
    pub sbatch: String,
    pub reason: String,
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
    let verdict;
    let statement;
    let cores_f = cores.map(|c| c as f64);
    if mean < IDLE_CORES {
        verdict = "idle";
        statement = format!(
            "used {mean:.2} cores on average{}: the job was essentially idle",
            cores.map(|c| format!(" of {c}")).unwrap_or_default()
        );
    } else if p95 <= ONE_CORE && cores.is_some_and(|c| c > 1) {
        verdict = "serial";
        statement = format!(
            "used {p50:.1} of {} cores for {:.0} % of the time: this job runs serially; request 1 core",
            cores.unwrap_or(0),
            at_most_one * 100.0
        );
    } else if cores_f.is_some_and(|c| mean >= 0.75 * c) {
        verdict = "parallel";
        statement = format!(
            "kept {mean:.1} of {} cores busy on average (p95 {p95:.1}): scales to its allocation",
            cores.unwrap_or(0)
        );
    } else {
        verdict = "partially_parallel";
        statement = format!(
            "used {mean:.1} cores on average, {p95:.1} at p95{}, and ≤1 core for {:.0} % of the time{}",
            cores.map(|c| format!(" of {c} allocated")).unwrap_or_default(),
            at_most_one * 100.0,
            ceiling.map(|c| format!("; more cores could speed it up at most {c:.1}×")).unwrap_or_default()
        );
    }

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
    let mut imbalance_statement = None;
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
            if !underused.is_empty() {
                imbalance_statement = Some(format!(
                    "node(s) {} did almost no work ({} of the mean node's CPU time): the job is imbalanced across its {n_nodes} nodes",
                    underused.join(", "),
                    nodes
                        .iter()
                        .filter(|l| underused.contains(&l.node))
                        .map(|l| format!("{:.0} %", 100.0 * l.share_of_mean.unwrap_or(0.0)))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            } else if max / mean_cpu > 1.5 {
                imbalance_statement = Some(format!(
                    "the busiest node used {:.1}× the mean node's CPU time",
                    max / mean_cpu
                ));
            }
        }
    }
    Some(Scalability {
        verdict: verdict.into(),
        statement,
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
        imbalance_max_over_mean: imbalance,
        underused_nodes: underused,
        imbalance_statement,
    })
}

pub fn waste(s: &JobSummary) -> Waste {
    let h = s.elapsed_s / 3600.0;
    let core_alloc = s.alloc.cores.map(|c| c as f64 * h);
    let core_used = s.cpu.usage_s.map(|c| c / 3600.0);
    let gb = 1024.0 * 1024.0 * 1024.0;
    let nodes = s.alloc.nodes.max(1) as f64;
    let mem_alloc = s
        .alloc
        .mem_per_node_bytes
        .map(|m| m as f64 / gb * nodes * h);
    let node_peaks: f64 = s
        .nodes
        .iter()
        .filter_map(|n| n.mem.peak_bytes)
        .map(|p| p as f64 / gb)
        .sum();
    let mem_needed = (!s.nodes.is_empty()).then_some(node_peaks * h);
    Waste {
        core_hours_allocated: core_alloc,
        core_hours_used: core_used,
        core_hours_wasted: match (core_alloc, core_used) {
            (Some(a), Some(u)) => Some((a - u).max(0.0)),
            _ => None,
        },
        mem_gb_hours_allocated: mem_alloc,
        mem_gb_hours_needed: mem_needed,
        mem_gb_hours_wasted: match (mem_alloc, mem_needed) {
            (Some(a), Some(u)) => Some((a - u).max(0.0)),
            _ => None,
        },
        gpu_hours_allocated: None,
        gpu_hours_wasted: None,
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

fn mib(b: f64) -> String {
    format!("{:.0} MiB", b / 1024.0 / 1024.0)
}

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
                    kind: "memory_leak".into(),
                    severity: "warning".into(),
                    message: format!(
                        "node {}: memory grew steadily by {} per hour (R² {:.2}), {} over the job: a leak or an unbounded cache",
                        n.node,
                        mib(slope * 3600.0),
                        r2,
                        mib(growth)
                    ),
                });
            }
        }
        let phases = idle_phases(n, idle_min_s);
        let tail = phases
            .last()
            .filter(|(_, e)| (n.elapsed_s - e).abs() <= (n.elapsed_s * 0.05).max(60.0));
        if let Some((a, _)) = tail.filter(|(a, b)| b - a >= 0.25 * n.elapsed_s && *a > 0.0) {
            f.push(Finding {
                kind: "busy_then_idle".into(),
                severity: "warning".into(),
                message: format!(
                    "node {}: busy for the first {} then idle for the remaining {} ({:.0} % of the job)",
                    n.node,
                    fmt_dur(*a),
                    fmt_dur(n.elapsed_s - a),
                    100.0 * (n.elapsed_s - a) / n.elapsed_s
                ),
            });
        }
        for (a, b) in phases
            .iter()
            .filter(|p| Some(*p) != tail.filter(|(a, _)| *a > 0.0))
        {
            f.push(Finding {
                kind: "idle_phase".into(),
                severity: "info".into(),
                message: format!(
                    "node {}: idle (< {IDLE_CORES} cores) for {} from +{} to +{}",
                    n.node,
                    fmt_dur(b - a),
                    fmt_dur(*a),
                    fmt_dur(*b)
                ),
            });
        }
        if let (Some(peak), Some(limit)) =
            (n.mem.peak_bytes, n.mem.limit_bytes.or(n.alloc_mem_bytes))
        {
            let pct = 100.0 * peak as f64 / limit as f64;
            if pct >= cfg.near_oom_pct && n.mem.oom_kill_events.unwrap_or(0) == 0 {
                f.push(Finding {
                    kind: "near_oom".into(),
                    severity: "warning".into(),
                    message: format!(
                        "node {}: memory peaked at {} = {pct:.0} % of its {} limit",
                        n.node,
                        mib(peak as f64),
                        mib(limit as f64)
                    ),
                });
            }
        }
        if let Some(k) = n.mem.oom_kill_events.filter(|&k| k > 0) {
            f.push(Finding {
                kind: "oom".into(),
                severity: "critical".into(),
                message: format!(
                    "node {}: the kernel killed {k} process(es) for exceeding the memory limit",
                    n.node
                ),
            });
        }
    }
    if s.state == "TIMEOUT" {
        f.push(Finding {
            kind: "timeout".into(),
            severity: "critical".into(),
            message: "the job was killed at its time limit".into(),
        });
    }
    f
}

fn fmt_dur(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, s / 60 % 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

pub fn classify(s: &JobSummary, sc: Option<&Scalability>, cfg: &Report) -> Classification {
    let mut ev = Vec::new();
    let cpu_eff = s.efficiency.cpu_pct;
    let mem_eff = s.efficiency.mem_pct;
    if let Some(c) = cpu_eff {
        ev.push(format!("CPU efficiency {c:.0} %"));
    }
    if let Some(m) = mem_eff {
        ev.push(format!("memory peak {m:.0} % of request"));
    }
    let io_rate = match (s.io.read_bytes, s.io.write_bytes) {
        (None, None) => None,
        (r, w) => Some((r.unwrap_or(0) + w.unwrap_or(0)) as f64 / s.elapsed_s.max(1.0)),
    };
    if let Some(r) = io_rate {
        ev.push(format!("I/O {}/s on average", mib(r)));
    }
    let oom = s.mem.oom_kill_events.unwrap_or(0) > 0;
    let class = if sc.is_some_and(|x| x.verdict == "idle") {
        "idle"
    } else if oom
        || mem_eff.is_some_and(|m| m >= cfg.near_oom_pct)
        || s.mem.failcnt.unwrap_or(0) > 0 && mem_eff.is_some_and(|m| m >= 80.0)
    {
        if s.mem.failcnt.unwrap_or(0) > 0 {
            ev.push(format!(
                "hit its memory limit {} time(s) (failcnt)",
                s.mem.failcnt.unwrap_or(0)
            ));
        }
        "memory_bound"
    } else if io_rate.is_some_and(|r| r >= 50.0 * 1024.0 * 1024.0)
        && cpu_eff.is_some_and(|c| c < 50.0)
    {
        "io_bound"
    } else if cpu_eff.is_some_and(|c| c >= cfg.cpu_efficiency_warn_pct) {
        "cpu_bound"
    } else {
        "mixed"
    };
    Classification {
        class: class.into(),
        evidence: ev,
    }
}

/// Rounds a memory size up to a clean `--mem` value (MiB granularity below 1 GiB, else 1 GiB, min 100M).
pub fn mem_flag(bytes: f64) -> String {
    let mib = (bytes / 1024.0 / 1024.0).ceil().max(100.0);
    if mib < 1024.0 {
        format!("{}M", ((mib / 100.0).ceil() * 100.0) as u64)
    } else {
        format!("{}G", (mib / 1024.0).ceil() as u64)
    }
}

/// `--time` value (D-HH:MM:SS or HH:MM:SS), rounded up to 5 minutes.
pub fn time_flag(seconds: f64) -> String {
    let m = ((seconds / 60.0 / 5.0).ceil() * 5.0).max(5.0) as u64;
    let (d, h, mm) = (m / 1440, m / 60 % 24, m % 60);
    if d > 0 {
        format!("{d}-{h:02}:{mm:02}:00")
    } else {
        format!("{h:02}:{mm:02}:00")
    }
}

pub fn advice(s: &JobSummary, sc: Option<&Scalability>, cfg: &Report) -> Vec<Advice> {
    let mut out = Vec::new();
    let enough = s.elapsed_s >= cfg.min_elapsed_for_advice_s as f64;
    // Cores.
    if let (Some(sc), Some(cores), Some(eff)) = (sc, s.alloc.cores, s.efficiency.cpu_pct) {
        if enough && eff < cfg.cpu_efficiency_warn_pct && cores > 1 {
            let per_node = s.alloc.nodes.max(1) as f64;
            let want = if sc.verdict == "serial" {
                1
            } else {
                ((sc.busy_cores_p95 / per_node) * 1.1).ceil().max(1.0) as u32
            };
            let have_per_node = (cores as f64 / per_node).round() as u32;
            if want < have_per_node {
                out.push(Advice {
                    sbatch: format!("#SBATCH --cpus-per-task={want}"),
                    reason: format!(
                        "{}; CPU efficiency was {eff:.0} % of {cores} cores (p95 busy {:.1})",
                        sc.statement, sc.busy_cores_p95
                    ),
                });
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
            out.push(Advice {
                sbatch: format!("#SBATCH --mem={}", mem_flag(want)),
                reason: format!("the job was killed for exceeding its {} limit; its true need is unknown, so double it", mib(req as f64)),
            });
        } else if pct >= cfg.near_oom_pct {
            out.push(Advice {
                sbatch: format!("#SBATCH --mem={}", mem_flag(peak as f64 * headroom)),
                reason: format!(
                    "peak {} was {pct:.0} % of the {} request: add {:.0} % headroom",
                    mib(peak as f64),
                    mib(req as f64),
                    cfg.mem_headroom_pct
                ),
            });
        } else if enough && pct < cfg.mem_efficiency_warn_pct {
            let want = peak as f64 * headroom;
            if mem_flag(want) != mem_flag(req as f64) {
                out.push(Advice {
                    sbatch: format!("#SBATCH --mem={}", mem_flag(want)),
                    reason: format!(
                        "peak {} was only {pct:.0} % of the {} request (+{:.0} % headroom)",
                        mib(peak as f64),
                        mib(req as f64),
                        cfg.mem_headroom_pct
                    ),
                });
            }
        }
    }
    // Time.
    if let Some(limit) = s.alloc.time_limit_s {
        let margin = 1.0 + cfg.time_margin_pct / 100.0;
        if s.state == "TIMEOUT" {
            out.push(Advice {
                sbatch: format!("#SBATCH --time={}", time_flag(limit as f64 * 2.0)),
                reason: format!(
                    "the job hit its {} limit before finishing; double it (or checkpoint)",
                    time_flag(limit as f64)
                ),
            });
        } else if enough
            && s.state == "COMPLETED"
            && 100.0 * s.elapsed_s / (limit as f64) < cfg.time_efficiency_warn_pct
        {
            let want = time_flag(s.elapsed_s * margin);
            if want != time_flag(limit as f64) {
                out.push(Advice {
                    sbatch: format!("#SBATCH --time={want}"),
                    reason: format!(
                        "ran {} of a {} limit; a tighter limit (+{:.0} % margin) starts sooner in backfill",
                        fmt_dur(s.elapsed_s),
                        time_flag(limit as f64),
                        cfg.time_margin_pct
                    ),
                });
            }
        }
    }
    // Nodes.
    if let Some(sc) = sc {
        let n = s.alloc.nodes.max(s.nodes.len() as u32);
        if n > 1 && !sc.underused_nodes.is_empty() && s.missing_nodes.is_empty() {
            let busy = n as usize - sc.underused_nodes.len();
            out.push(Advice {
                sbatch: format!("#SBATCH --nodes={}", busy.max(1)),
                reason: sc.imbalance_statement.clone().unwrap_or_default(),
            });
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
    a.waste.gpu_hours_allocated = Some(gpus.iter().map(|g| g.gpu_hours_allocated).sum());
    let wasted: Vec<f64> = gpus.iter().filter_map(|g| g.gpu_hours_wasted).collect();
    a.waste.gpu_hours_wasted = (!wasted.is_empty()).then(|| wasted.iter().sum());
    use crate::gpu::summary::GpuClass;
    let idle = gpus
        .iter()
        .filter(|g| g.never_used || g.classification == Some(GpuClass::GpuIdle))
        .count();
    let bound = gpus
        .iter()
        .filter(|g| g.classification == Some(GpuClass::GpuBound))
        .count();
    let utils: Vec<String> = gpus
        .iter()
        .map(|g| {
            let who = format!(
                "{}{}",
                g.node
                    .as_deref()
                    .map(|n| format!("{n}:"))
                    .unwrap_or_default(),
                g.gres_index
                    .or(g.index)
                    .map_or("?".into(), |i| i.to_string())
            );
            format!(
                "GPU {who} {}",
                g.util_mean_pct
                    .map_or("utilization unknown".into(), |u| format!("{u:.0} % busy"))
            )
        })
        .collect();
    if idle == gpus.len() {
        a.classification.class = "gpu_idle".into();
        a.classification.evidence.insert(
            0,
            format!(
                "{idle} of {} allocated GPU(s) idle: {}",
                gpus.len(),
                utils.join(", ")
            ),
        );
    } else if bound > 0
        && (bound * 2 >= gpus.len() || matches!(a.classification.class.as_str(), "idle" | "mixed"))
    {
        a.classification.class = "gpu_bound".into();
        a.classification.evidence.insert(0, utils.join(", "));
    } else {
        a.classification.evidence.push(utils.join(", "));
    }
    for g in &gpus {
        for f in &g.findings {
            a.anomalies.push(Finding {
                kind: "gpu".into(),
                severity: if g.never_used || g.lost {
                    "warning".into()
                } else {
                    "info".into()
                },
                message: f.clone(),
            });
        }
    }
    for x in crate::gpu::gpu_advice(&gpus) {
        // "Request k GPU(s) instead of n" becomes a resubmit-ready line; the rest stay as comments.
        let k = x
            .line
            .strip_prefix("Request ")
            .and_then(|r| r.split_whitespace().next())
            .and_then(|k| k.parse::<u32>().ok());
        let sbatch = match k {
            Some(k) => format!("#SBATCH --gres=gpu:{k}"),
            None => format!("# {}", x.line),
        };
        a.advice.push(Advice {
            sbatch,
            reason: x.reason,
        });
    }
}

pub fn analyze(s: &JobSummary, cfg: &Report) -> Analysis {
    let sc = scalability(s);
    let mut a = analyze_cpu_mem(s, cfg, sc);
    add_gpus(s, &mut a);
    a
}

fn analyze_cpu_mem(s: &JobSummary, cfg: &Report, sc: Option<Scalability>) -> Analysis {
    Analysis {
        waste: waste(s),
        classification: classify(s, sc.as_ref(), cfg),
        anomalies: anomalies(s, cfg),
        advice: advice(s, sc.as_ref(), cfg),
        scalability: sc,
        memory_accounting: match s.nodes.first().and_then(|n| n.cgroup_version) {
            Some(crate::sample::CgroupVersion::V2) => "SLURM enforces --mem on the cgroup's memory.current: anonymous memory (rss) + page cache + shmem/tmpfs. Page cache is reclaimed under pressure; rss and shmem are not.".into(),
            _ => "SLURM enforces --mem on the cgroup's memory usage (memory.usage_in_bytes): rss + page cache + shmem/tmpfs. Page cache is reclaimed under pressure; rss and shmem are not.".into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::summary::*;

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
            start_unix_ms: 0,
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
            io: IoTotals::default(),
            tasks_max: Some(1),
            threads_max: None,
            cpu_efficiency_pct: None,
            steps: vec![],
            timeline,
            quality: Quality {
                samples: 60,
                sampler_ended_cleanly: true,
                final_counters: true,
                ..Default::default()
            },
            user_options: Default::default(),
            gpus: Vec::new(),
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
            state: "COMPLETED".into(),
            state_reason: None,
            exit_code: Some(0),
            start_unix_ms: 0,
            end_unix_ms: (elapsed * 1000.0) as u64,
            elapsed_s: elapsed,
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
        assert_eq!(sc.verdict, "serial");
        assert!(sc.statement.contains("request 1 core"), "{}", sc.statement);
        assert_eq!(sc.share_time_at_most_one_core_pct, 100.0);
        assert_eq!(sc.amdahl_speedup_ceiling, Some(1.0));
        assert!(
            a.advice
                .iter()
                .any(|x| x.sbatch == "#SBATCH --cpus-per-task=1"),
            "{:?}",
            a.advice
        );
        assert!((a.waste.core_hours_wasted.unwrap() - 1200.0 / 3600.0).abs() < 1e-6);
    }

    #[test]
    fn parallel_job_gets_no_cpu_advice() {
        let s = job(vec![node("a", 1200.0, |_| 2.0, |_| 3 << 30)], None);
        let a = analyze(&s, &Report::default());
        assert_eq!(a.scalability.as_ref().unwrap().verdict, "parallel");
        assert!(
            !a.advice.iter().any(|x| x.sbatch.contains("cpus-per-task")),
            "{:?}",
            a.advice
        );
        assert_eq!(a.classification.class, "cpu_bound");
    }

    #[test]
    fn over_requested_memory_gets_mem_advice_with_headroom() {
        let s = job(vec![node("a", 1200.0, |_| 2.0, |_| 300 * MIB)], None);
        let a = analyze(&s, &Report::default());
        // 300 MiB × 1.25 = 375 MiB → rounded up to 400M
        let m = a
            .advice
            .iter()
            .find(|x| x.sbatch.starts_with("#SBATCH --mem="))
            .expect("mem advice");
        assert_eq!(m.sbatch, "#SBATCH --mem=400M");
        assert!(m.reason.contains("300 MiB"), "{}", m.reason);
    }

    #[test]
    fn well_used_job_gets_no_advice() {
        let s = job(vec![node("a", 1200.0, |_| 2.0, |_| 3500 * MIB)], Some(1500));
        let a = analyze(&s, &Report::default());
        assert!(a.advice.is_empty(), "{:?}", a.advice);
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
                .any(|x| x.sbatch == "#SBATCH --time=00:30:00"),
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
        let kinds: Vec<&str> = a.anomalies.iter().map(|f| f.kind.as_str()).collect();
        assert!(kinds.contains(&"memory_leak"), "{kinds:?}");
        assert!(kinds.contains(&"busy_then_idle"), "{kinds:?}");
    }

    #[test]
    fn idle_job_is_classified_idle() {
        let s = job(vec![node("a", 1200.0, |_| 0.0, |_| 10 * MIB)], None);
        let a = analyze(&s, &Report::default());
        assert_eq!(a.classification.class, "idle");
        assert_eq!(a.scalability.unwrap().verdict, "idle");
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
        assert!(sc.imbalance_statement.unwrap().contains("n2"));
        assert!(
            a.advice.iter().any(|x| x.sbatch == "#SBATCH --nodes=1"),
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
        s.state = "OUT_OF_MEMORY".into();
        let a = analyze(&s, &Report::default());
        assert!(a
            .anomalies
            .iter()
            .any(|f| f.kind == "oom" && f.severity == "critical"));
        assert!(
            a.advice.iter().any(|x| x.sbatch == "#SBATCH --mem=8G"),
            "{:?}",
            a.advice
        );
        assert_eq!(a.classification.class, "memory_bound");
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
}
