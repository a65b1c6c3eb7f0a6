//! The words of the report: every typed fact of the model (verdict, class, finding, advice, GPU
//! finding, end reason, data gaps) is worded here and only here. Numbers go through `format.rs`.
//! Names from the job or the node (node names, GPU names) are cleaned by the caller's view.

use super::clean::clean;
use super::format::*;
use jobscope_model::gpu::summary::{GpuAdvice, GpuFinding, GpuRef};
use jobscope_model::gpu::GpuSummary;
use jobscope_model::job::{EndReason, JobState};
use jobscope_model::sample::CgroupVersion;
use jobscope_model::summary::analysis::{
    AdviceReason, AdviceWithheld, Analysis, Evidence, FindingKind, JobClass, Scalability, Severity,
    StallResource, Verdict, Waste,
};
use jobscope_model::summary::JobSummary;

pub fn state(s: JobState) -> &'static str {
    s.as_str()
}

/// The marker of a running job's report (`jobscope show` on a running job, `cli/src/live/`):
/// its figures are those up to its last sample. Empty for a job that has ended.
pub fn running_note(s: &JobSummary) -> String {
    if s.state != JobState::Running {
        return String::new();
    }
    format!(
        "still running: figures up to the last sample, {}",
        jobscope_model::time::utc_time(s.end_unix_ms / 1000)
    )
}

/// Why the job ended as it did (from the SLURM adapter's typed reason).
pub fn end_reason(r: &EndReason) -> String {
    match r {
        EndReason::OomKills { kills } => format!(
            "{kills} process(es) killed by the kernel OOM killer in the job cgroup (memory limit reached)"
        ),
        EndReason::SchedulerOom => "SLURM reported an out-of-memory kill in the job".into(),
        EndReason::SchedulerSays { state } => format!("SLURM says {}", state.as_str()),
        EndReason::TimeLimit { elapsed_s, limit_s } => format!(
            "ran {} and reached its {} time limit",
            fmt_duration(*elapsed_s),
            fmt_slurm_time(*limit_s)
        ),
        EndReason::Signal { signal } => format!("terminated by signal {signal}"),
        EndReason::ExitCode { code } => format!("exit code {code}"),
        EndReason::StepFailed { code, step } => match step {
            Some(step) => format!(
                "step {} failed with exit code {code} although the batch script exited 0",
                clean(step, 40)
            ),
            None => format!("a step failed with exit code {code} although the batch script exited 0"),
        },
        EndReason::EndedInProlog => "cancelled while its prolog was running: none of its programs started".into(),
        EndReason::Preempted => "preempted: a job of a higher-priority partition needed its resources".into(),
        EndReason::Requeued => "requeued: this run ended and the job runs again under the same id (that run has its own report)".into(),
        EndReason::StepEndNotSeen { steps } => format!(
            "how it ended is unknown: jobscope did not see step{} {} end (its slurmstepd died or was killed), and SLURM named no failure",
            if steps.len() == 1 { "" } else { "s" },
            steps.iter().map(|st| clean(st, 40)).collect::<Vec<_>>().join(", ")
        ),
        EndReason::Unknown => "neither SLURM nor the job's exit status said how it ended".into(),
        EndReason::Legacy { text } => clean(text, 200),
    }
}

pub fn severity(s: Severity) -> &'static str {
    match s {
        Severity::Info => "INFO",
        Severity::Warning => "WARNING",
        Severity::Critical => "CRITICAL",
    }
}

pub fn verdict(v: Verdict) -> &'static str {
    match v {
        Verdict::Serial => "serial",
        Verdict::Parallel => "parallel",
        Verdict::PartiallyParallel => "partially parallel",
        Verdict::Idle => "idle",
        Verdict::SingleCore => "single core",
    }
}

/// The verdict's sentence, with its numbers.
pub fn verdict_statement(sc: &Scalability) -> String {
    let cores = sc.allocated_cores;
    let mean = sc.busy_cores_mean;
    match sc.verdict {
        Verdict::Idle => format!(
            "used {mean:.2} cores on average{}: the job was essentially idle",
            cores.map(|c| format!(" of {c}")).unwrap_or_default()
        ),
        Verdict::SingleCore => format!(
            "used {} of 1 core on average (p95 {})",
            fmt_cores(mean),
            fmt_cores(sc.busy_cores_p95)
        ),
        Verdict::Serial => format!(
            "used {} of {} cores for {:.0} % of the time: this job runs serially; request 1 core",
            fmt_cores(sc.busy_cores_p50),
            cores.unwrap_or(0),
            sc.share_time_at_most_one_core_pct
        ),
        Verdict::Parallel => format!(
            "kept {} of {} busy on average (p95 {}): scales to its allocation",
            fmt_cores(mean),
            plural(u64::from(cores.unwrap_or(0)), "core"),
            fmt_cores(sc.busy_cores_p95)
        ),
        Verdict::PartiallyParallel => format!(
            "used {} cores on average, {} at p95{}, and ≤1 core for {:.0} % of the time{}",
            fmt_cores(mean),
            fmt_cores(sc.busy_cores_p95),
            cores
                .map(|c| format!(" of {c} allocated"))
                .unwrap_or_default(),
            sc.share_time_at_most_one_core_pct,
            sc.amdahl_speedup_ceiling
                .map(|c| format!("; more cores could speed it up at most {c:.1}×"))
                .unwrap_or_default()
        ),
    }
}

/// The imbalance across nodes, if there is one worth saying.
pub fn imbalance(sc: &Scalability) -> Option<String> {
    if !sc.underused_nodes.is_empty() {
        let shares: Vec<String> = sc
            .nodes
            .iter()
            .filter(|l| sc.underused_nodes.contains(&l.node))
            .map(|l| fmt_pct0(Some(100.0 * l.share_of_mean.unwrap_or(0.0))))
            .collect();
        return Some(format!(
            "{} {} did almost no work ({} of the mean node's CPU time): the job is imbalanced across its {} nodes",
            if sc.underused_nodes.len() == 1 { "node" } else { "nodes" },
            sc.underused_nodes.iter().map(|n| clean(n, 64)).collect::<Vec<_>>().join(", "),
            if shares.is_empty() { "none reported".to_string() } else { shares.join(", ") },
            sc.nodes_allocated
        ));
    }
    sc.imbalance_max_over_mean
        .filter(|r| *r > 1.5)
        .map(|r| format!("the busiest node used {r:.1}× the mean node's CPU time"))
}

/// The class as the report words it: its archived name with `-` (`cpu-bound`), so that what a
/// reader copies from a report is a `--class` the audit takes (`JobClass::parse`).
pub fn class(c: JobClass) -> String {
    match c {
        // No class could be given: the report says so rather than name a class "insufficient-data".
        JobClass::InsufficientData => "unknown".to_string(),
        c => c.as_str().replace('_', "-"),
    }
}

pub fn gpu_ref(r: &GpuRef) -> String {
    let i = r.index.map_or_else(|| "?".to_string(), |i| i.to_string());
    match &r.node {
        Some(n) => format!("{}:{i}", clean(n, 64)),
        None => i,
    }
}

fn gpu_refs(v: &[GpuRef]) -> String {
    v.iter().map(gpu_ref).collect::<Vec<_>>().join(", ")
}

/// The figures the class rests on.
pub fn evidence(class: JobClass, e: &Evidence) -> String {
    if class == JobClass::InsufficientData {
        return "no samples".into();
    }
    let mut ev = Vec::new();
    if let Some(c) = e.cpu_efficiency_pct {
        ev.push(format!("CPU efficiency {}", fmt_pct(Some(c))));
    }
    if let Some(m) = e.mem_peak_pct {
        ev.push(format!("memory peak {} of request", fmt_pct(Some(m))));
    }
    if let Some(r) = e.io_bytes_per_s {
        ev.push(format!("I/O {}/s on average", fmt_bytes(Some(r as u64))));
    }
    if let Some(h) = e.mem_limit_hits {
        ev.push(format!("hit its memory limit {h} time(s) (failcnt)"));
    }
    if let Some(n) = e.net_bytes_per_s {
        ev.push(format!(
            "network {}/s on average",
            fmt_bytes(Some(n as u64))
        ));
    }
    if let Some(w) = e.cpu_wait_pct {
        ev.push(format!(
            "waited for a CPU {} of runnable time",
            fmt_pct0(Some(w))
        ));
    }
    if let Some(l) = e.lock_share_pct {
        ev.push(format!(
            "{} of system calls synchronisation",
            fmt_pct0(Some(l))
        ));
    }
    if !e.gpus.is_empty() {
        let utils = e
            .gpus
            .iter()
            .map(|g| {
                format!(
                    "GPU {} {}",
                    gpu_ref(&g.gpu),
                    g.util_mean_pct
                        .map_or("utilization unknown".into(), |u| format!("{u:.0} % busy"))
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        match class {
            JobClass::GpuIdle => ev.insert(
                0,
                format!(
                    "{} of {} allocated GPU(s) idle: {utils}",
                    e.gpus_idle,
                    e.gpus.len()
                ),
            ),
            JobClass::GpuBound => ev.insert(0, utils),
            _ => ev.push(utils),
        }
    }
    ev.join(", ")
}

/// `GPU 1 (NVIDIA A100, GPU-5c3e…)` of a GPU summary.
pub fn gpu_label(g: &GpuSummary) -> String {
    clean(&g.identity.label(), 160)
}

/// A GPU's utilization in words: the device's figures, where they come from when they are point
/// reads, and the job's own share when other processes used the GPU too (both, so a user on a
/// shared GPU sees what was theirs).
pub fn gpu_util(g: &GpuSummary) -> String {
    use jobscope_model::gpu::summary::GpuUtilSource;
    let device = format!(
        "mean {}, max {}",
        fmt_pct(g.util_mean_pct),
        fmt_pct(g.util_max_pct)
    );
    let source = match g.util_source {
        Some(GpuUtilSource::PointReads) => " (point reads)",
        Some(GpuUtilSource::Mixed) => " (partly point reads)",
        _ => "",
    };
    // SM activity beside kernel time, where the driver gave it (NVML GPM): the figure that
    // tells a busy GPU from a wasted one.
    let sm = g
        .sm_active_mean_pct
        .map(|sm| {
            format!(
                "; SM activity mean {} (occupancy {}, tensor {}, DRAM bandwidth {}{})",
                fmt_pct(Some(sm)),
                fmt_pct(g.sm_occupancy_mean_pct),
                fmt_pct(g.tensor_active_mean_pct),
                fmt_pct(g.dram_active_mean_pct),
                g.sm_clock_mean_mhz
                    .map(|c| format!("; SM clock mean {c:.0} MHz"))
                    .unwrap_or_default()
            )
        })
        .unwrap_or_default();
    match g.job_util_mean_pct {
        Some(job) if g.other_processes_seen => format!(
            "device {device}{source}; this job's share mean {}, max {} (other processes used this GPU too){sm}",
            fmt_pct(Some(job)),
            fmt_pct(g.job_util_max_pct)
        ),
        _ => format!("{device}{source}{sm}"),
    }
}

pub fn gpu_finding(label: &str, f: &GpuFinding) -> String {
    match f {
        GpuFinding::Lost => format!("{label} was lost during the job (fell off the bus)"),
        GpuFinding::NeverUsed { allocated_s } => format!(
            "{label} was never used: allocated for {}, no utilization and no process of the job on it",
            fmt_duration(*allocated_s)
        ),
        GpuFinding::IdleTail { tail_s, after_s } => format!(
            "{label} was used at first, then idle for the last {} (from {} into the job)",
            fmt_duration(*tail_s),
            fmt_duration(*after_s)
        ),
        GpuFinding::IdlePeriods {
            count,
            min_s,
            total_s,
        } => format!(
            "{label} was idle {count} time(s) for at least {} ({} in total)",
            fmt_duration(*min_s),
            fmt_duration(*total_s)
        ),
        GpuFinding::UtilizationUnknown { mig } => format!(
            "{label}: utilization is not reported for this device{}",
            if *mig {
                " (MIG instance); job processes are used instead"
            } else {
                ""
            }
        ),
        GpuFinding::OtherProcesses => {
            format!("{label}: processes of another job or user ran on this GPU")
        }
        GpuFinding::HardwareThrottled { reasons } => format!(
            "{label} was slowed down by the hardware: {}",
            clean(&reasons.join(", "), 200)
        ),
        GpuFinding::LowSmActivity {
            util_mean_pct,
            sm_active_mean_pct,
        } => format!(
            "{label}: kernels ran {} of the time but kept {} of the SMs busy (SM activity): \
             most of the GPU waited; small kernels or too little parallel work \
             per kernel leave SMs idle while utilization reads busy",
            fmt_pct0(Some(*util_mean_pct)),
            fmt_sm_pct(*sm_active_mean_pct)
        ),
        GpuFinding::NodeHealth {
            throttle_power_s,
            throttle_thermal_s,
            ecc_uncorrected,
            xid_errors,
            xid_events,
        } => gpu_node_health(
            label,
            *throttle_power_s,
            *throttle_thermal_s,
            *ecc_uncorrected,
            *xid_errors,
            xid_events,
        ),
    }
}

/// An SM figure: whole percent, one decimal below 1 % (0.4 % is not 0 %).
fn fmt_sm_pct(p: f64) -> String {
    if p < 1.0 {
        fmt_pct(Some(p))
    } else {
        fmt_pct0(Some(p))
    }
}

/// A GPU's health during the job, as facts for the node's admins (not the job's doing).
fn gpu_node_health(
    label: &str,
    power_s: Option<f64>,
    thermal_s: Option<f64>,
    ecc_uncorrected: Option<u64>,
    xid_errors: Option<u64>,
    xids: &[jobscope_model::gpu::summary::XidEvent],
) -> String {
    let mut held = Vec::new();
    if let Some(t) = power_s {
        held.push(format!("by its power cap for {}", fmt_duration(t)));
    }
    if let Some(t) = thermal_s {
        held.push(format!("by a thermal limit for {}", fmt_duration(t)));
    }
    let mut facts = Vec::new();
    if !held.is_empty() {
        facts.push(format!("{label} was held back {}", held.join(" and ")));
    }
    if let Some(n) = ecc_uncorrected {
        facts.push(format!("{n} uncorrected ECC error(s)"));
    }
    if let Some(n) = xid_errors {
        const SHOWN: usize = 5;
        let mut codes: Vec<String> = xids
            .iter()
            .take(SHOWN)
            .map(|x| format!("{} at {} into the job", x.code, fmt_duration(x.t_s)))
            .collect();
        if xids.len() > SHOWN {
            codes.push("…".into());
        }
        facts.push(if codes.is_empty() {
            format!("{n} XID error(s)")
        } else {
            format!("{n} XID error(s) ({})", codes.join(", "))
        });
    }
    let facts = facts.join("; ");
    if held.is_empty() {
        format!("{label}: {facts}: the node's problem, not the job's (for the admins)")
    } else {
        format!("{facts}: the node's problem, not the job's (for the admins)")
    }
}

/// The GPU summary a job-level finding is about (for its label).
fn find_gpu<'a>(s: &'a JobSummary, r: &GpuRef) -> Option<&'a GpuSummary> {
    s.nodes
        .iter()
        .flat_map(|n| n.gpus.iter())
        .find(|g| GpuRef::of(g) == *r)
}

pub fn finding(s: &JobSummary, f: &FindingKind) -> String {
    match f {
        FindingKind::MemoryLeak {
            node,
            slope_bytes_per_s,
            r2,
            growth_bytes,
        } => format!(
            "node {}: memory grew steadily by {} per hour (R² {r2:.2}), {} over the job: a leak or an unbounded cache",
            clean(node, 64),
            fmt_bytes(Some((slope_bytes_per_s * 3600.0).max(0.0) as u64)),
            fmt_bytes(Some(growth_bytes.max(0.0) as u64))
        ),
        FindingKind::BusyThenIdle {
            node,
            busy_s,
            idle_s,
            idle_share_pct,
        } => format!(
            "node {}: busy for the first {} then idle for the remaining {} ({} of the job)",
            clean(node, 64),
            fmt_duration(*busy_s),
            fmt_duration(*idle_s),
            fmt_pct0(Some(*idle_share_pct))
        ),
        FindingKind::IdlePhase {
            node,
            start_s,
            end_s,
            idle_cores,
        } => format!(
            "node {}: idle (< {idle_cores} cores) for {} from +{} to +{}",
            clean(node, 64),
            fmt_duration(end_s - start_s),
            fmt_duration(*start_s),
            fmt_duration(*end_s)
        ),
        FindingKind::NearOom {
            node,
            peak_bytes,
            limit_bytes,
            pct,
        } => format!(
            "node {}: memory peaked at {} = {} of its {} limit",
            clean(node, 64),
            fmt_bytes(Some(*peak_bytes)),
            fmt_pct(Some(*pct)),
            fmt_bytes(Some(*limit_bytes))
        ),
        FindingKind::Oom { node, kills } => format!(
            "node {}: the kernel killed {kills} process(es) for exceeding the memory limit",
            clean(node, 64)
        ),
        FindingKind::Timeout { limit_s } => match limit_s {
            Some(l) => format!("the job was killed at its time limit ({})", fmt_slurm_time(*l)),
            None => "the job was killed at its time limit".into(),
        },
        FindingKind::Stalled {
            node, resource, pct, ..
        } => format!(
            "node {}: stalled on {} {} of the time (tasks waiting for it: kernel pressure stall information)",
            clean(node, 64),
            stall_resource(*resource),
            fmt_pct0(Some(*pct))
        ),
        FindingKind::CpuWait {
            node,
            wait_pct,
            wait_s,
            threads_max,
            cores,
        } => {
            let why = match (threads_max, cores) {
                (Some(t), Some(c)) if *t > u64::from(*c) => format!(
                    ": up to {t} threads on the {} allocated (match threads to cores, e.g. OMP_NUM_THREADS={c}, or ask for more cores)",
                    plural(u64::from(*c), "core")
                ),
                (_, Some(c)) => format!(
                    ": more runnable threads than the {} allocated",
                    plural(u64::from(*c), "core")
                ),
                _ => ": more runnable threads than cores".into(),
            };
            format!(
                "node {}: threads waited for a CPU {} of their runnable time ({}){why}",
                clean(node, 64),
                fmt_pct0(Some(*wait_pct)),
                // As the kernel view writes the same figure.
                fmt_elapsed(*wait_s)
            )
        }
        FindingKind::LockContention {
            pct,
            sync_calls,
            calls,
        } => format!(
            "{} of system calls ({} of {}) were futex and other synchronisation calls: threads contend for locks",
            fmt_pct0(Some(*pct)),
            fmt_count(*sync_calls),
            fmt_count(*calls)
        ),
        FindingKind::SmallIo {
            small_reads,
            small_writes,
        } => format!(
            "{} reads and {} writes of under 4 KiB each: buffer your I/O (larger reads and writes, or a buffered stream)",
            fmt_count(*small_reads),
            fmt_count(*small_writes)
        ),
        FindingKind::Gpu { gpu, finding } => {
            let label = match find_gpu(s, gpu) {
                Some(g) => gpu_label(g),
                None => format!("GPU {}", gpu_ref(gpu)),
            };
            gpu_finding(&label, finding)
        }
    }
}

pub fn stall_resource(r: StallResource) -> &'static str {
    match r {
        StallResource::Cpu => "CPU",
        StallResource::Memory => "memory",
        StallResource::Io => "I/O",
    }
}

/// The alternative text of the chart of waiting for a CPU over time (`crate::charts::cpu_wait_png`)
/// of `nodes`: each node's share over the job, and its highest of one interval.
pub fn cpu_wait_chart_alt(nodes: &[&jobscope_model::summary::NodeSummary]) -> String {
    let parts: Vec<String> = nodes
        .iter()
        .map(|n| {
            let worst = n
                .timeline
                .iter()
                .filter_map(|p| p.cpu_wait_pct)
                .filter(|v| v.is_finite())
                .reduce(f64::max);
            (
                fmt_pct0(n.kernel.as_ref().and_then(|k| k.cpu_wait_pct())),
                format!(
                    "on node {} (at worst {})",
                    clean(&n.node, 64),
                    fmt_pct0(worst)
                ),
            )
        })
        .enumerate()
        .map(|(i, (pct, on))| {
            if i == 0 {
                format!("{pct} of their runnable time {on}")
            } else {
                format!("{pct} {on}")
            }
        })
        .collect();
    format!("Threads waited for a CPU {}", parts.join(", "))
}

/// The kernel view in lines of "label  figures", each only where the figure was seen.
pub fn kernel_lines(k: &jobscope_model::summary::KernelTotals) -> Vec<String> {
    let mut v = Vec::new();
    let row = |label: &str, text: String| format!("{label:<19}{text}");
    if let Some(w) = k.cpu_wait_s {
        v.push(row(
            "Waiting for a CPU",
            // Seconds as every duration of the report reads (`fmt_elapsed`: `1.2 s`, `36m05s`).
            format!(
                "{} ({} of the time runnable; running {})",
                fmt_elapsed(w),
                fmt_pct0(k.cpu_wait_pct()),
                fmt_elapsed(k.run_s.unwrap_or(0.0))
            ),
        ));
    }
    if let (Some(vol), Some(inv)) = (k.ctx_switches_voluntary, k.ctx_switches_involuntary) {
        v.push(row(
            "Context switches",
            format!(
                "{} voluntary (waiting), {} involuntary (preempted)",
                fmt_count(vol),
                fmt_count(inv)
            ),
        ));
    }
    match &k.syscalls {
        Some(sc) => {
            let total = sc.total();
            let mut parts: Vec<(u64, String)> = sc
                .by_class()
                .iter()
                .filter(|(_, n)| *n > 0)
                .map(|(c, n)| {
                    (
                        *n,
                        format!(
                            "{} {}",
                            c.name(),
                            fmt_pct0(Some(100.0 * *n as f64 / total.max(1) as f64))
                        ),
                    )
                })
                .collect();
            parts.sort_by_key(|p| std::cmp::Reverse(p.0));
            let parts: Vec<String> = parts.into_iter().map(|p| p.1).collect();
            v.push(row(
                "System calls",
                format!("{}: {}", fmt_count(total), parts.join(", ")),
            ));
        }
        None => v.push(row(
            "System calls",
            "not counted on this node (the collector runs without --syscalls)".into(),
        )),
    }
    if let (Some(r), Some(w)) = (k.small_reads, k.small_writes) {
        v.push(row(
            "Small I/O",
            format!(
                "{} reads, {} writes under 4 KiB",
                fmt_count(r),
                fmt_count(w)
            ),
        ));
    }
    if k.net_sent_bytes.is_some() || k.net_received_bytes.is_some() {
        v.push(row(
            "Network",
            format!(
                "sent {} in {} sends, received {} in {} receives (IPv4/IPv6 payload)",
                fmt_bytes(k.net_sent_bytes),
                fmt_count(k.net_sends.unwrap_or(0)),
                fmt_bytes(k.net_received_bytes),
                fmt_count(k.net_receives.unwrap_or(0))
            ),
        ));
    }
    if k.block_read_bytes.is_some() || k.block_write_bytes.is_some() {
        // The page cache is counted only where the collector runs with --page-cache.
        let dirtied = match k.dirtied_bytes {
            Some(_) => format!(
                "; {} of page cache dirtied (written back later)",
                fmt_bytes(k.dirtied_bytes)
            ),
            None => "; dirtied page cache not counted on this node".to_string(),
        };
        v.push(row(
            "Block devices",
            format!(
                "read {}, written {} by the tasks{dirtied}",
                fmt_bytes(k.block_read_bytes),
                fmt_bytes(k.block_write_bytes),
            ),
        ));
    }
    v
}

/// The stalls line: the share of wall time the job's tasks waited for CPU, memory and I/O (only
/// the resources the kernel gave figures for). `None` without pressure figures (cgroup v1).
pub fn stalls(p: &jobscope_model::summary::Pressure) -> Option<String> {
    let mut parts = Vec::new();
    if let Some(c) = p.cpu_some_pct {
        parts.push(format!("CPU {}", fmt_pct(Some(c))));
    }
    match (p.mem_some_pct, p.mem_full_pct) {
        (Some(m), Some(f)) => parts.push(format!(
            "memory {} (all tasks at once {})",
            fmt_pct(Some(m)),
            fmt_pct(Some(f))
        )),
        (Some(m), None) => parts.push(format!("memory {}", fmt_pct(Some(m)))),
        _ => {}
    }
    if let Some(i) = p.io_some_pct {
        parts.push(format!("I/O {}", fmt_pct(Some(i))));
    }
    (!parts.is_empty()).then(|| {
        format!(
            "stalled on {} of the time (over {})",
            parts.join(", "),
            fmt_elapsed(p.window_s)
        )
    })
}

/// CPU quota throttling, when the kernel counts it (cgroup v2 `cpu.stat`).
pub fn throttling(cpu: &jobscope_model::summary::CpuTotals) -> Option<String> {
    match (cpu.throttled_s, cpu.throttled_periods) {
        (Some(s), Some(n)) => Some(format!("{} in {n} quota period(s)", fmt_secs(Some(s)))),
        (Some(s), None) => Some(fmt_secs(Some(s))),
        (None, Some(n)) => Some(format!("in {n} quota period(s)")),
        (None, None) => None,
    }
}

/// What a piece of GPU advice asks for, when it is not an `#SBATCH` option.
pub fn gpu_advice_line(a: &GpuAdvice) -> String {
    match a {
        GpuAdvice::CpuOnlyPartition { .. } => {
            "Run this job on a CPU-only partition: it did not use its GPU(s)".into()
        }
        GpuAdvice::FewerGpus {
            keep, allocated, ..
        } => format!("Request {keep} GPU(s) instead of {allocated}"),
        GpuAdvice::SmallerGpu { .. } => "A MIG slice or a smaller GPU would do".into(),
        GpuAdvice::ReleaseWhenDone { .. } => "Release the GPUs when the GPU work is done (end the job, or split it into a GPU job and a CPU job)".into(),
        GpuAdvice::CheckIdleTime { .. } => {
            "Check why the GPUs were idle half of the time (data loading, CPU-bound phases)".into()
        }
    }
}

pub fn gpu_advice_reason(a: &GpuAdvice) -> String {
    match a {
        GpuAdvice::CpuOnlyPartition {
            gpus,
            gpu_hours_allocated,
        } => format!(
            "{gpus} GPU(s) allocated for {} GPU-hours; no utilization and no process of the job on any of them",
            fmt_hours(Some(*gpu_hours_allocated))
        ),
        GpuAdvice::FewerGpus {
            unused,
            gpu_hours_wasted,
            ..
        } => format!(
            "GPU(s) {} were never used ({} GPU-hours wasted)",
            gpu_refs(unused),
            fmt_hours(Some(*gpu_hours_wasted))
        ),
        GpuAdvice::SmallerGpu {
            gpus,
            mem_peak_bytes,
            mem_total_bytes,
            util_mean_pct_max,
        } => format!(
            "peak GPU memory {} of {}, mean utilization at most {} on GPU(s) {}",
            fmt_bytes(Some(*mem_peak_bytes)),
            fmt_bytes(Some(*mem_total_bytes)),
            fmt_pct0(Some(*util_mean_pct_max)),
            gpu_refs(gpus)
        ),
        GpuAdvice::ReleaseWhenDone { gpus, idle_tail_s } => format!(
            "GPU(s) {} sat idle for the last {} of the job",
            gpu_refs(gpus),
            fmt_duration(*idle_tail_s)
        ),
        GpuAdvice::CheckIdleTime {
            gpu_hours_wasted,
            gpu_hours_allocated,
        } => format!(
            "{} of {} GPU-hours were idle",
            fmt_hours(Some(*gpu_hours_wasted)),
            fmt_hours(Some(*gpu_hours_allocated))
        ),
    }
}

/// Why a piece of advice is given, with its numbers. `a` is the analysis it belongs to (the core
/// advice repeats the verdict).
pub fn advice_reason(a: &Analysis, r: &AdviceReason) -> String {
    let statement = a.scalability.as_ref().map(verdict_statement);
    match r {
        AdviceReason::Serial {
            cores,
            busy_cores_p95,
            cpu_efficiency_pct,
            ..
        }
        | AdviceReason::FewerCores {
            cores,
            busy_cores_p95,
            cpu_efficiency_pct,
        } => format!(
            "{}CPU efficiency was {} of {cores} cores (p95 busy {})",
            statement.map(|s| format!("{s}; ")).unwrap_or_default(),
            fmt_pct(Some(*cpu_efficiency_pct)),
            fmt_cores(*busy_cores_p95)
        ),
        AdviceReason::OomKilled { limit_bytes } => format!(
            "the job was killed for exceeding its {} limit; its true need is unknown, so double it",
            fmt_bytes(Some(*limit_bytes))
        ),
        AdviceReason::NearOom {
            peak_bytes,
            request_bytes,
            pct,
            headroom_pct,
        } => format!(
            "peak {} was {} of the {} request: add {headroom_pct:.0} % headroom",
            fmt_bytes(Some(*peak_bytes)),
            fmt_pct(Some(*pct)),
            fmt_bytes(Some(*request_bytes))
        ),
        AdviceReason::MemoryUnused {
            peak_bytes,
            request_bytes,
            pct,
            headroom_pct,
        } => format!(
            "peak {} was only {} of the {} request (+{headroom_pct:.0} % headroom)",
            fmt_bytes(Some(*peak_bytes)),
            fmt_pct(Some(*pct)),
            fmt_bytes(Some(*request_bytes))
        ),
        AdviceReason::TimedOut { limit_s } => format!(
            "the job hit its {} limit before finishing; double it (or checkpoint)",
            fmt_slurm_time(*limit_s)
        ),
        AdviceReason::TimeUnused {
            elapsed_s,
            limit_s,
            margin_pct,
        } => format!(
            "ran {} of a {} limit; a tighter limit (+{margin_pct:.0} % margin) starts sooner in backfill",
            fmt_duration(*elapsed_s),
            fmt_slurm_time(*limit_s)
        ),
        AdviceReason::NodesUnderused { .. } => a
            .scalability
            .as_ref()
            .and_then(imbalance)
            .unwrap_or_else(|| "some nodes did almost no work".into()),
        AdviceReason::Gpu { advice } => gpu_advice_reason(advice),
        AdviceReason::MemUpdate {
            peak_bytes,
            counted_peak_bytes,
            delay_s,
            margin_pct,
        } => format!(
            "or let SLURM lower the limit: {} of the {} peak was memory SLURM's RSS measure \
             counts, and from {} on the memory in use +{margin_pct:.0} % covered every later \
             sample",
            fmt_bytes(Some(*counted_peak_bytes)),
            fmt_bytes(Some(*peak_bytes)),
            fmt_duration(*delay_s as f64)
        ),
        AdviceReason::MemUpdateUnsafe {
            peak_bytes,
            shmem_peak_bytes,
        } => format!(
            "shmem/tmpfs reached {} of the {} peak: --mem-update cuts the limit to RSS, which \
             leaves shmem out while the limit counts it, so the cut can OOM the job",
            fmt_bytes(Some(*shmem_peak_bytes)),
            fmt_bytes(Some(*peak_bytes))
        ),
    }
}

/// The comment line of the `--mem-update` warning, where advice has an `#SBATCH` line.
pub const MEM_UPDATE_UNSAFE_LINE: &str = "# do not use --mem-update for this job";

/// What to say where there is no advice (or only some).
pub fn no_advice(a: &Analysis) -> String {
    match &a.advice_withheld {
        Some(AdviceWithheld::NoData) => {
            "No advice: there are no samples to judge the job's use by.".into()
        }
        Some(AdviceWithheld::ShortJob { elapsed_s, min_s }) => format!(
            "No advice: the job ran {}, under the {} needed to judge its use.",
            fmt_elapsed(*elapsed_s),
            fmt_duration(*min_s as f64)
        ),
        None => "Advice: none, the job used its request well.".into(),
    }
}

/// A note under the advice when some of it was withheld.
pub fn advice_note(a: &Analysis) -> Option<String> {
    match &a.advice_withheld {
        Some(AdviceWithheld::ShortJob { elapsed_s, min_s }) if !a.advice.is_empty() => {
            Some(format!(
                "CPU, memory and time use are judged only from {} on; the job ran {}.",
                fmt_duration(*min_s as f64),
                fmt_elapsed(*elapsed_s)
            ))
        }
        _ => None,
    }
}

/// Which memory figure SLURM enforces its limit on, for the cgroup version the job ran under.
pub fn memory_accounting(v: Option<CgroupVersion>) -> &'static str {
    match v {
        Some(CgroupVersion::V2) => "SLURM enforces --mem on the cgroup's memory.current: anonymous memory (rss) + page cache + shmem/tmpfs. Page cache is reclaimed under pressure; rss and shmem are not.",
        _ => "SLURM enforces --mem on the cgroup's memory usage (memory.usage_in_bytes): rss + page cache + shmem/tmpfs. Page cache is reclaimed under pressure; rss and shmem are not.",
    }
}

/// Why a waste figure is `n/a` although the allocation is known: its use was not measured. Said in
/// words so that a blank is not read as nothing, or everything, unused.
pub fn unmeasured_waste(w: &Waste) -> Vec<&'static str> {
    let mut out = Vec::new();
    if w.core_hours_allocated.is_some() && w.core_hours_used.is_none() {
        out.push("CPU time was not measured: the unused core-hours are unknown.");
    }
    if w.mem_gb_hours_allocated.is_some() && w.mem_gb_hours_needed.is_none() {
        out.push(
            "The memory peak was not measured on every node: the unused memory GB-hours are unknown.",
        );
    }
    out
}

pub const NO_DATA: &str = "No samples: jobscope has no data on how this job used its allocation, so this report claims nothing about it (see the data notes).";

#[cfg(test)]
mod tests {
    use super::*;
    use jobscope_model::vocab::Vocabulary;

    /// Words of `line` that are seconds written without their space (`16s`, `1.5s`): every
    /// duration reads as the report's CPU time does (`15.5 s`), or as one compound token
    /// (`1m05s`).
    pub(crate) fn unspaced_seconds(line: &str) -> Vec<String> {
        line.split(|c: char| c.is_whitespace() || "(),;:".contains(c))
            .filter(|w| {
                w.strip_suffix('s').is_some_and(|n| {
                    !n.is_empty() && n.chars().all(|c| c.is_ascii_digit() || c == '.')
                })
            })
            .map(str::to_string)
            .collect()
    }

    /// The kernel view's times read as the report's other durations: `1.0 s`, `15.5 s`.
    #[test]
    fn kernel_view_durations_are_spelled_as_every_other() {
        let k = jobscope_model::summary::KernelTotals {
            run_s: Some(15.5),
            cpu_wait_s: Some(1.0),
            ..Default::default()
        };
        let lines = kernel_lines(&k);
        assert!(
            lines[0].contains("1.0 s (6 % of the time runnable; running 15.5 s)"),
            "{lines:?}"
        );
        let long = jobscope_model::summary::KernelTotals {
            run_s: Some(725.0),
            cpu_wait_s: Some(36.0),
            ..Default::default()
        };
        let lines = kernel_lines(&long);
        assert!(
            lines[0].contains("36.0 s (") && lines[0].contains("running 12m05s)"),
            "{lines:?}"
        );
        for l in kernel_lines(&k).iter().chain(&lines) {
            assert!(unspaced_seconds(l).is_empty(), "{l}");
        }
        assert_eq!(
            unspaced_seconds("ran 16s, then 1.5s (1m05s; 3 s)"),
            ["16s", "1.5s"]
        );
    }

    #[test]
    fn every_class_the_report_prints_is_a_class_the_audit_takes() {
        // What readers have seen in reports so far (the golden reports hold some of them).
        assert_eq!(class(JobClass::CpuBound), "cpu-bound");
        assert_eq!(class(JobClass::MemoryBound), "memory-bound");
        assert_eq!(class(JobClass::GpuIdle), "gpu-idle");
        assert_eq!(class(JobClass::Mixed), "mixed");
        assert_eq!(class(JobClass::InsufficientData), "unknown");
        for c in JobClass::ALL {
            assert_eq!(JobClass::parse(&class(c)), Some(c), "{}", class(c));
        }
    }

    /// The GPU verdict rests on SM activity where the driver gave it; the node's health is said
    /// as the admins' facts, not the user's fault.
    #[test]
    fn gpu_sm_activity_and_node_health_in_words() {
        use jobscope_model::gpu::summary::XidEvent;
        let low = gpu_finding(
            "GPU 1",
            &GpuFinding::LowSmActivity {
                util_mean_pct: 98.0,
                sm_active_mean_pct: 6.0,
            },
        );
        assert!(
            low.starts_with("GPU 1: kernels ran 98 % of the time but kept 6 % of the SMs busy"),
            "{low}"
        );
        let tiny = gpu_finding(
            "GPU 1",
            &GpuFinding::LowSmActivity {
                util_mean_pct: 100.0,
                sm_active_mean_pct: 0.4,
            },
        );
        assert!(tiny.contains("kept 0.4 % of the SMs"), "{tiny}");
        let health = gpu_finding(
            "GPU 1",
            &GpuFinding::NodeHealth {
                throttle_power_s: Some(720.0),
                throttle_thermal_s: None,
                ecc_uncorrected: None,
                xid_errors: Some(2),
                xid_events: vec![
                    XidEvent {
                        t_s: 65.0,
                        code: 79,
                    },
                    XidEvent {
                        t_s: 3725.0,
                        code: 48,
                    },
                ],
            },
        );
        assert_eq!(
            health,
            "GPU 1 was held back by its power cap for 12m00s; 2 XID error(s) (79 at 1m05s into \
             the job, 48 at 1h02m05s into the job): the node's problem, not the job's (for the \
             admins)"
        );
        let ecc = gpu_finding(
            "GPU 0",
            &GpuFinding::NodeHealth {
                throttle_power_s: None,
                throttle_thermal_s: None,
                ecc_uncorrected: Some(1),
                xid_errors: None,
                xid_events: vec![],
            },
        );
        assert_eq!(
            ecc,
            "GPU 0: 1 uncorrected ECC error(s): the node's problem, not the job's (for the admins)"
        );
        assert!(unspaced_seconds(&health).is_empty(), "{health}");
    }
}
