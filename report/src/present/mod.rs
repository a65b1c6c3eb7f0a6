//! The presenter: the one place that decides what the report says and how its figures read.
//!
//! [`job_view`] turns a [`JobSummary`] (typed facts, no sentences) into ONE view model, [`View`],
//! with every figure formatted ([`format`]), every fact worded ([`words`]) and every untrusted
//! string cleaned ([`clean::clean`]). The text report (`report-templates/report.txt.hbs`, also what
//! `jobscope show` prints), the HTML mail (`report.html.hbs`), the subject (`subject.hbs`) and the
//! array digest (`digest.txt.hbs`, `digest.html.hbs`, from [`digest_view`]) all render a `View`, so
//! they cannot disagree on a figure. Templates only lay text out; registries run in strict mode
//! (a template naming a field the view lacks is an error the tests catch, not a blank in a report).
//! The mail code builds MIME from what this module renders and formats nothing itself.

pub mod clean;
pub mod format;
pub mod history;
pub mod templates;
pub mod watch;
pub mod words;

pub use clean::{clean, clean_line, clean_line_cols, width};
pub use format::*;
pub use templates::Templates;

use jobscope_model::job::JobState;
use jobscope_model::summary::analysis::Analysis;
use jobscope_model::summary::{JobSummary, NodeSummary, Point};
use serde::Serialize;

/// Width of the text report's sparklines, in characters.
const SPARK_WIDTH: usize = 48;

/// The one view model of a report (or, with `digest`, of an array digest).
#[derive(Debug, Clone, Serialize)]
pub struct View {
    /// `1234`, or `1230_4` for an array task.
    pub job_id: String,
    pub name: String,
    pub user: String,
    pub account: String,
    pub cluster: String,
    pub partition: String,
    pub state: String,
    pub state_ok: bool,
    /// How the job ended, in words; empty when nobody said.
    pub state_reason: String,
    pub elapsed: String,
    /// `of a 1h00m00s limit` / `no time limit`.
    pub time_limit: String,
    pub cpu_efficiency: String,
    pub mem_efficiency: String,
    pub time_efficiency: String,
    pub partial: bool,
    pub partial_reasons: Vec<String>,
    pub generator: String,
    /// The same figures, shorter, for the subject line.
    pub short: Short,
    /// The report proper; absent in a digest's view.
    #[serde(flatten)]
    pub report: Option<Report>,
    pub digest: Option<Digest>,
    /// Chart placement in the HTML mail (filled in by the mail code, which draws the charts).
    pub charts: Charts,
}

#[derive(Debug, Clone, Serialize)]
pub struct Short {
    pub elapsed: String,
    pub cpu_efficiency: String,
    pub mem_efficiency: String,
    pub time_efficiency: String,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Charts {
    pub width: u32,
    pub height: u32,
    pub shown: usize,
    pub total: usize,
    pub omitted: bool,
    /// The job's chart of waiting for a CPU (the kernel view), under the report's kernel view;
    /// absent without one.
    pub cpu_wait: Option<ChartImage>,
}

/// A chart of the job in the HTML mail: its Content-ID and what it shows, in words.
#[derive(Debug, Clone, Serialize)]
pub struct ChartImage {
    pub cid: String,
    /// [`words::cpu_wait_chart_alt`]: the figure, for readers who do not see the image.
    pub alt: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub nodes_count: u32,
    pub cores: String,
    pub mem_alloc: String,
    pub gpus_alloc: String,
    pub cpu_time: String,
    pub cpu_user: String,
    pub cpu_system: String,
    pub mem_peak: String,
    pub mem_rss: String,
    pub mem_cache: String,
    pub mem_shmem: String,
    pub oom_kills: String,
    pub io_source: String,
    pub io_read: String,
    pub io_write: String,
    pub io_peak: String,
    /// Share of wall time stalled on CPU, memory and I/O (cgroup v2 pressure); empty on v1.
    pub stalls: String,
    /// CPU quota throttling (cgroup v2 `cpu.stat`); empty where the kernel does not count it.
    pub throttling: String,
    /// The kernel view (`words::kernel_lines`); empty without a collector.
    pub kernel: Vec<String>,
    /// What the site's rules did while the job ran (`watch::interventions`); empty if nothing.
    pub interventions: Vec<String>,
    pub samples: u64,
    /// Set when there are no samples: what to say instead of figures.
    pub no_data: String,
    pub classification: String,
    pub classification_evidence: String,
    pub waste: WasteView,
    pub scalability: Option<ScalabilityView>,
    pub memory_accounting: String,
    pub findings: Vec<FindingView>,
    pub advice: Vec<AdviceView>,
    /// Said instead of the advice when there is none (and why).
    pub no_advice: String,
    /// Said under the advice when some was withheld; empty otherwise.
    pub advice_note: String,
    /// The job against its partition's recent jobs (audit index cohorts); empty without.
    pub peers: Vec<String>,
    /// `Based on your last 12 runs of "train":`, empty without history-based advice.
    pub history_heading: String,
    pub history: Vec<AdviceView>,
    pub gpus: Vec<GpuView>,
    pub notes: Vec<String>,
    pub nodes: Vec<NodeView>,
    pub multi_node: bool,
}

/// `unused` of `allocated` resource-hours, and the unused share.
#[derive(Debug, Clone, Serialize)]
pub struct HoursView {
    pub unused: String,
    pub allocated: String,
    pub unused_share: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct WasteView {
    pub core_hours: HoursView,
    pub gb_hours: HoursView,
    pub gpu_hours: Option<HoursView>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ScalabilityView {
    pub verdict: String,
    pub statement: String,
    pub p50: String,
    pub p95: String,
    pub max: String,
    pub mean: String,
    pub one_core_share: String,
    pub amdahl: String,
    pub timeline: String,
    pub imbalance: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct FindingView {
    pub severity: String,
    pub message: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct AdviceView {
    /// `#SBATCH --mem=400M`, or `# <what to do>` for advice that is not an option.
    pub line: String,
    pub reason: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct GpuView {
    pub label: String,
    pub util: String,
    pub mem: String,
    pub energy: String,
    pub idle: String,
    pub wasted: String,
    pub findings: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct StepView {
    pub name: String,
    pub elapsed: String,
    pub cpu_time: String,
    pub mem_peak: String,
    pub exit: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct NodeView {
    pub name: String,
    pub cores: String,
    pub cpu_time: String,
    pub cpu_efficiency: String,
    pub mem_peak: String,
    pub samples: u64,
    pub cpu_spark: String,
    pub mem_spark: String,
    pub steps: Vec<StepView>,
    /// Content-IDs of this node's charts in the HTML mail (set by the mail code).
    pub cpu_chart: Option<String>,
    pub mem_chart: Option<String>,
}

/// The array digest: one row per task and two histograms.
#[derive(Debug, Clone, Serialize)]
pub struct Digest {
    pub array_id: u32,
    /// The array's job name (the view's `name` names the digest).
    pub job_name: String,
    pub tasks: usize,
    pub completed: usize,
    pub rows: Vec<DigestRow>,
    pub runtime: Vec<HistogramRow>,
    pub memory: Vec<HistogramRow>,
}

#[derive(Debug, Clone, Serialize)]
pub struct DigestRow {
    pub task: String,
    pub job: String,
    pub state: String,
    pub elapsed: String,
    pub cpu_efficiency: String,
    pub mem_peak: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct HistogramRow {
    pub from: String,
    pub to: String,
    pub bar: String,
    pub count: usize,
}

fn or_na(v: Option<String>) -> String {
    v.unwrap_or_else(|| "n/a".into())
}

/// The job as SLURM users write it: `1234`, or `1230_4` for an array task.
pub fn job_label(s: &JobSummary) -> String {
    match (s.array_job_id, s.array_task_id) {
        (Some(a), Some(t)) => format!("{a}_{t}"),
        _ => s.job_id.to_string(),
    }
}

/// The fields every view of a job has (report, subject, digest).
fn head(s: &JobSummary) -> View {
    View {
        job_id: job_label(s),
        name: clean(s.name.as_deref().unwrap_or("(unknown)"), 120),
        user: clean(s.user.as_deref().unwrap_or("(unknown)"), 64),
        account: clean(s.account.as_deref().unwrap_or("-"), 64),
        cluster: clean(s.cluster.as_deref().unwrap_or("-"), 64),
        partition: clean(s.partition.as_deref().unwrap_or("-"), 64),
        state: words::state(s.state).to_string(),
        state_ok: s.state.is_success(),
        state_reason: s
            .end_reason
            .as_ref()
            .map(words::end_reason)
            .map(|r| clean(&r, 200))
            .unwrap_or_else(|| words::running_note(s)),
        elapsed: fmt_elapsed(s.elapsed_s),
        time_limit: s
            .alloc
            .time_limit_s
            .map(|t| format!("of a {} limit", fmt_slurm_time(t)))
            .unwrap_or_else(|| "no time limit".into()),
        cpu_efficiency: fmt_pct(s.efficiency.cpu_pct),
        mem_efficiency: fmt_pct(s.efficiency.mem_pct),
        time_efficiency: fmt_pct(s.efficiency.time_pct),
        partial: s.partial,
        partial_reasons: s
            .partial_reasons
            .iter()
            .take(50)
            .map(|r| clean(r, 300))
            .collect(),
        generator: clean(&s.generator, 64),
        short: Short {
            elapsed: short_duration(s.elapsed_s),
            cpu_efficiency: fmt_pct0(s.efficiency.cpu_pct),
            mem_efficiency: fmt_pct0(s.efficiency.mem_pct),
            time_efficiency: fmt_pct0(s.efficiency.time_pct),
        },
        report: None,
        digest: None,
        charts: Charts {
            total: s.nodes.len(),
            ..Default::default()
        },
    }
}

fn hours(unused: Option<f64>, allocated: Option<f64>) -> HoursView {
    HoursView {
        unused: fmt_hours(unused),
        allocated: fmt_hours(allocated),
        unused_share: fmt_share(unused, allocated),
    }
}

fn node_view(n: &NodeSummary) -> NodeView {
    let busy: Vec<Option<f64>> = n
        .timeline
        .iter()
        .map(|p: &Point| p.busy_cores_max.or(p.busy_cores))
        .collect();
    let mem: Vec<Option<f64>> = n
        .timeline
        .iter()
        .map(|p| p.mem_bytes_max.map(|m| m as f64))
        .collect();
    let cores = n
        .alloc_cores
        .map(|c| c as f64)
        .unwrap_or_else(|| busy.iter().flatten().cloned().fold(1.0, f64::max));
    let mem_max = n
        .mem
        .limit_bytes
        .or(n.alloc_mem_bytes)
        .map(|m| m as f64)
        .unwrap_or_else(|| mem.iter().flatten().cloned().fold(1.0, f64::max));
    NodeView {
        name: clean(&n.node, 64),
        cores: or_na(n.alloc_cores.map(|c| c.to_string())),
        cpu_time: fmt_secs(n.cpu.usage_s),
        cpu_efficiency: fmt_pct(n.cpu_efficiency_pct),
        mem_peak: fmt_bytes(n.mem.peak_bytes),
        samples: n.quality.samples,
        cpu_spark: sparkline(&busy, cores, SPARK_WIDTH),
        mem_spark: sparkline(&mem, mem_max, SPARK_WIDTH),
        steps: n
            .steps
            .iter()
            .take(200)
            .map(|st| StepView {
                name: clean(&st.step, 32),
                elapsed: or_na(st.elapsed_s.map(fmt_elapsed)),
                cpu_time: fmt_secs(st.cpu_s),
                mem_peak: fmt_bytes(st.mem_peak_bytes),
                exit: or_na(st.exit_status.map(|e| e.to_string())),
            })
            .collect(),
        cpu_chart: None,
        mem_chart: None,
    }
}

fn gpu_view(g: &jobscope_model::gpu::GpuSummary) -> GpuView {
    let label = words::gpu_label(g);
    GpuView {
        label: clean(
            &format!("{}: {label}", g.node.as_deref().unwrap_or("?")),
            200,
        ),
        util: if g.utilization_unknown {
            "unknown (MIG: NVML gives no per-instance utilization)".to_string()
        } else {
            words::gpu_util(g)
        },
        mem: format!(
            "{} of {}",
            fmt_bytes(g.mem_peak_bytes),
            fmt_bytes(g.mem_total_bytes)
        ),
        energy: g
            .energy_kwh
            .map(|e| {
                format!(
                    "{}{}",
                    fmt_energy(e),
                    if g.energy_estimated {
                        " (estimated from power)"
                    } else {
                        ""
                    }
                )
            })
            .unwrap_or_else(|| "n/a".into()),
        idle: g.idle_s.map(fmt_duration).unwrap_or_else(|| "n/a".into()),
        wasted: fmt_hours(g.gpu_hours_wasted),
        findings: g
            .findings
            .iter()
            .map(|f| clean(&words::gpu_finding(&label, f), 400))
            .collect(),
    }
}

fn report(s: &JobSummary) -> Report {
    let a: Analysis = s.analysis.clone().unwrap_or_default();
    let no_data = a.insufficient_data;
    Report {
        nodes_count: s.alloc.nodes,
        cores: or_na(s.alloc.cores.map(|c| c.to_string())),
        mem_alloc: fmt_bytes(s.alloc.mem_per_node_bytes),
        gpus_alloc: gpus_alloc(s.alloc.gpus.as_deref()),
        cpu_time: fmt_secs(s.cpu.usage_s),
        // Scaled to the total: no part reads larger than the whole (`CpuTotals::split_s`).
        cpu_user: fmt_secs(s.cpu.split_s().0),
        cpu_system: fmt_secs(s.cpu.split_s().1),
        mem_peak: fmt_bytes(s.mem.peak_bytes),
        mem_rss: fmt_bytes(s.mem.rss_peak_bytes),
        mem_cache: fmt_bytes(s.mem.cache_peak_bytes),
        mem_shmem: fmt_bytes(s.mem.shmem_peak_bytes),
        oom_kills: or_na(s.mem.oom_kill_events.map(|o| o.to_string())),
        io_source: clean(s.io.source.as_deref().unwrap_or("n/a"), 16),
        io_read: fmt_bytes(s.io.read_bytes),
        io_write: fmt_bytes(s.io.write_bytes),
        io_peak: or_na(
            s.io.peak_bytes_per_s
                .map(|r| format!("{}/s", fmt_bytes(Some(r as u64)))),
        ),
        stalls: s
            .pressure
            .as_ref()
            .and_then(words::stalls)
            .unwrap_or_default(),
        throttling: words::throttling(&s.cpu).unwrap_or_default(),
        kernel: s
            .kernel
            .as_ref()
            .map(words::kernel_lines)
            .unwrap_or_default(),
        interventions: watch::interventions(&s.nodes),
        samples: s.samples,
        no_data: if no_data {
            words::NO_DATA.into()
        } else {
            String::new()
        },
        classification: words::class(a.classification.class),
        classification_evidence: words::evidence(
            a.classification.class,
            &a.classification.evidence,
        ),
        waste: waste_view(&a.waste),
        scalability: a.scalability.as_ref().map(scalability_view),
        memory_accounting: words::memory_accounting(s.nodes.first().and_then(|n| n.cgroup_version))
            .into(),
        findings: finding_views(s, &a),
        advice: advice_views(&a),
        no_advice: words::no_advice(&a),
        advice_note: words::advice_note(&a).unwrap_or_default(),
        peers: a
            .peers
            .iter()
            .map(|p| clean(&history::peer(p), 300))
            .collect(),
        history_heading: a
            .history
            .as_ref()
            .map(|h| clean(&history::history_heading(h), 300))
            .unwrap_or_default(),
        history: a
            .history
            .as_ref()
            .map(history::history_lines)
            .unwrap_or_default(),
        gpus: s
            .nodes
            .iter()
            .flat_map(|n| n.gpus.iter())
            .map(gpu_view)
            .collect(),
        notes: quality_notes(s, &a),
        nodes: s.nodes.iter().map(node_view).collect(),
        multi_node: s.nodes.len() > 1,
    }
}

/// The GPUs allocated: SLURM_JOB_GPUS lists gres indices ("0,1"): say how many, then which.
fn gpus_alloc(gpus: Option<&str>) -> String {
    gpus.filter(|g| !g.is_empty())
        .map(|g| match jobscope_model::slurm::cpulist_count(g) {
            Some(n) => format!("{n} (gres index {})", clean(g, 64)),
            None => clean(g, 64),
        })
        .unwrap_or_else(|| "none".into())
}

/// Hours unused of hours allocated, per resource (GPUs only when the job had some).
fn waste_view(w: &jobscope_model::summary::analysis::Waste) -> WasteView {
    WasteView {
        core_hours: hours(w.core_hours_wasted, w.core_hours_allocated),
        gb_hours: hours(w.mem_gb_hours_wasted, w.mem_gb_hours_allocated),
        gpu_hours: w
            .gpu_hours_allocated
            .is_some()
            .then(|| hours(w.gpu_hours_wasted, w.gpu_hours_allocated)),
    }
}

/// How the job's parallelism went: the verdict, the busy-core figures and their timeline.
fn scalability_view(sc: &jobscope_model::summary::analysis::Scalability) -> ScalabilityView {
    ScalabilityView {
        verdict: words::verdict(sc.verdict).into(),
        statement: words::verdict_statement(sc),
        p50: fmt_cores(sc.busy_cores_p50),
        p95: fmt_cores(sc.busy_cores_p95),
        max: fmt_cores(sc.busy_cores_max),
        mean: fmt_cores(sc.busy_cores_mean),
        one_core_share: fmt_pct0(Some(sc.share_time_at_most_one_core_pct)),
        amdahl: sc
            .amdahl_speedup_ceiling
            .map(|c| format!("{c:.1}×"))
            .unwrap_or_else(|| "unbounded (no serial phase seen)".into()),
        timeline: sparkline(
            &sc.busy_cores_timeline
                .iter()
                .map(|v| Some(*v))
                .collect::<Vec<_>>(),
            sc.allocated_cores
                .map(|c| c as f64)
                .unwrap_or(sc.busy_cores_max),
            SPARK_WIDTH,
        ),
        imbalance: words::imbalance(sc).unwrap_or_default(),
    }
}

/// The analysis's findings, 50 at most.
fn finding_views(s: &JobSummary, a: &Analysis) -> Vec<FindingView> {
    a.anomalies
        .iter()
        .take(50)
        .map(|f| FindingView {
            severity: words::severity(f.severity).into(),
            message: clean(&words::finding(s, &f.what), 400),
        })
        .collect()
}

/// The advice, 20 at most: an `#SBATCH` line (or a GPU advice comment) and why.
fn advice_views(a: &Analysis) -> Vec<AdviceView> {
    a.advice
        .iter()
        .take(20)
        .map(|x| AdviceView {
            line: match (&x.request, &x.reason) {
                (Some(r), _) => r.sbatch_line(),
                (None, jobscope_model::summary::analysis::AdviceReason::Gpu { advice }) => {
                    format!("# {}", words::gpu_advice_line(advice))
                }
                (None, jobscope_model::summary::analysis::AdviceReason::MemUpdateUnsafe { .. }) => {
                    words::MEM_UPDATE_UNSAFE_LINE.to_string()
                }
                (None, _) => String::new(),
            },
            reason: clean(&words::advice_reason(a, &x.reason), 400),
        })
        .collect()
}

/// Data-quality notes: a waste figure that was not measured, then each node's notes (a GPU that
/// could not be identified, NVML timeouts, unreadable files), 10 per node, named by node.
fn quality_notes(s: &JobSummary, a: &Analysis) -> Vec<String> {
    words::unmeasured_waste(&a.waste)
        .into_iter()
        .map(String::from)
        .chain(s.nodes.iter().flat_map(|n| {
            n.quality
                .notes
                .iter()
                .filter(|x| !x.contains("No such file"))
                .take(10)
                .map(move |x| clean(&format!("{}: {x}", n.node), 300))
        }))
        .collect()
}

/// The view of one job's report.
pub fn job_view(s: &JobSummary) -> View {
    let mut v = head(s);
    v.report = Some(report(s));
    v
}

/// One task of an array, as recorded for the digest.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ArrayRow {
    pub task_id: u32,
    pub job_id: u32,
    pub state: JobState,
    pub elapsed_s: f64,
    pub cpu_pct: Option<f64>,
    pub mem_peak_bytes: Option<u64>,
    #[serde(default)]
    pub mem_pct: Option<f64>,
}

/// A fixed-width histogram of `vals` in `bins` equal bins; `fmt` formats a bin's bounds.
pub fn histogram(vals: &[f64], bins: usize, fmt: &dyn Fn(f64) -> String) -> Vec<HistogramRow> {
    if vals.is_empty() || bins == 0 {
        return vec![];
    }
    let (lo, hi) = vals
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), &v| (a.min(v), b.max(v)));
    let width = ((hi - lo) / bins as f64).max(f64::EPSILON);
    let mut counts = vec![0usize; bins];
    for v in vals {
        counts[(((v - lo) / width) as usize).min(bins - 1)] += 1;
    }
    let maxc = *counts.iter().max().unwrap_or(&1);
    counts
        .iter()
        .enumerate()
        .map(|(i, &c)| {
            let a = lo + width * i as f64;
            HistogramRow {
                from: fmt(a),
                to: fmt(a + width),
                bar: "█".repeat((c * 30).div_ceil(maxc.max(1))),
                count: c,
            }
        })
        .collect()
}

/// The view of an array digest: the head of `summary` (the digest's own summary: the array as the
/// job, see `notify::digest_summary`), `job_name` (the array's job name) and the tasks' rows.
pub fn digest_view(
    summary: &JobSummary,
    array_id: u32,
    job_name: Option<&str>,
    rows: &[ArrayRow],
) -> View {
    let mut v = head(summary);
    let elapsed: Vec<f64> = rows.iter().map(|r| r.elapsed_s).collect();
    let mem: Vec<f64> = rows
        .iter()
        .filter_map(|r| r.mem_peak_bytes)
        .map(|m| m as f64)
        .collect();
    v.digest = Some(Digest {
        array_id,
        job_name: clean(job_name.unwrap_or("(unknown)"), 120),
        tasks: rows.len(),
        completed: rows.iter().filter(|r| r.state.is_success()).count(),
        rows: rows
            .iter()
            .map(|r| DigestRow {
                task: r.task_id.to_string(),
                job: r.job_id.to_string(),
                state: words::state(r.state).to_string(),
                elapsed: fmt_duration(r.elapsed_s),
                cpu_efficiency: fmt_pct(r.cpu_pct),
                mem_peak: fmt_bytes(r.mem_peak_bytes),
            })
            .collect(),
        runtime: histogram(&elapsed, 5, &fmt_duration),
        memory: histogram(&mem, 5, &|b| fmt_bytes(Some(b as u64))),
    });
    v
}

/// Renders the text report of `s`. `color` adds ANSI bold/colour to headings (only on a TTY
/// without NO_COLOR; the caller decides).
pub fn render_text(s: &JobSummary, color: bool) -> Result<String, handlebars::RenderError> {
    let out = Templates::builtin().render_text(&job_view(s))?;
    Ok(if color { colorize(&out) } else { out })
}

/// Bold for section headings (lines ending in ':' at column 0), red for the state when not COMPLETED.
fn colorize(text: &str) -> String {
    text.lines()
        .map(|l| {
            if !l.starts_with(' ') && l.ends_with(':') {
                format!("\x1b[1m{l}\x1b[0m")
            } else if l.starts_with("State:") && !l.contains("COMPLETED") {
                format!("\x1b[31m{l}\x1b[0m")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A gres index list is counted, then listed; what is not one is shown as given.
    #[test]
    fn allocated_gpus_are_counted_then_named() {
        assert_eq!(gpus_alloc(Some("0,2-3")), "3 (gres index 0,2-3)");
        assert_eq!(gpus_alloc(None), "none");
        assert_eq!(gpus_alloc(Some("")), "none");
    }

    /// The GPU line of the waste appears only for a job that had GPUs.
    #[test]
    fn gpu_waste_only_with_gpus() {
        let w = jobscope_model::summary::analysis::Waste::default();
        assert!(waste_view(&w).gpu_hours.is_none());
        let w = jobscope_model::summary::analysis::Waste {
            gpu_hours_allocated: Some(4.0),
            ..Default::default()
        };
        assert!(waste_view(&w).gpu_hours.is_some());
    }
}
