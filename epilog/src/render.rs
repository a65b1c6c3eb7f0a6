//! Rendering of the text report from `report-templates/` (handlebars).
//!
//! The view model is built here with every number already formatted (units, rounding, sparklines),
//! so templates only lay text out. The registry runs in strict mode: a template that names a field the
//! view does not have is an error, caught by the tests, not a blank in a user's report. The text
//! registry does no HTML escaping (it is plain text); control characters from user-supplied strings
//! (job name…) are stripped before they reach any template.

use handlebars::Handlebars;
use jobscope_core::summary::{JobSummary, NodeSummary, Point};
use serde_json::{json, Map, Value};

pub const TEXT_TEMPLATE: &str = include_str!("../../report-templates/report.txt.hbs");

/// Removes control characters (terminal escapes, CR/LF) and caps the length of user-supplied text.
pub fn clean(s: &str, max_chars: usize) -> String {
    let mut out: String = s
        .chars()
        .filter(|c| !c.is_control())
        .take(max_chars)
        .collect();
    if s.chars().filter(|c| !c.is_control()).count() > max_chars {
        out.push('…');
    }
    out
}

pub fn fmt_bytes(b: Option<u64>) -> String {
    match b {
        None => "n/a".into(),
        Some(b) => {
            let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
            let mut v = b as f64;
            let mut i = 0;
            while v >= 1024.0 && i < units.len() - 1 {
                v /= 1024.0;
                i += 1;
            }
            if i == 0 {
                format!("{b} B")
            } else {
                format!("{v:.1} {}", units[i])
            }
        }
    }
}

pub fn fmt_duration(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    let (d, h, m, sec) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
    if d > 0 {
        format!("{d}d{h:02}h{m:02}m")
    } else if h > 0 {
        format!("{h}h{m:02}m{sec:02}s")
    } else if m > 0 {
        format!("{m}m{sec:02}s")
    } else {
        format!("{sec}s")
    }
}

pub fn fmt_pct(p: Option<f64>) -> String {
    p.map(|p| format!("{p:.1} %"))
        .unwrap_or_else(|| "n/a".into())
}

pub fn fmt_secs(s: Option<f64>) -> String {
    // Short: "12.1 s"; long: "1h02m05s (3725 s)", so the exact figure is always there once.
    s.map(|s| {
        if s < 60.0 {
            format!("{s:.1} s")
        } else {
            format!("{} ({s:.0} s)", fmt_duration(s))
        }
    })
    .unwrap_or_else(|| "n/a".into())
}

/// Resource-hours with three significant digits (short jobs waste fractions of an hour).
pub fn fmt_hours(h: Option<f64>) -> String {
    match h {
        None => "n/a".into(),
        Some(h) if h >= 100.0 => format!("{h:.0}"),
        Some(h) if h >= 1.0 => format!("{h:.2}"),
        Some(h) => format!("{h:.3}"),
    }
}

const SPARKS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// A Unicode sparkline of `vals` scaled to `max` (missing values are spaces), resampled to `width`.
pub fn sparkline(vals: &[Option<f64>], max: f64, width: usize) -> String {
    if vals.is_empty() || width == 0 {
        return String::new();
    }
    let n = vals.len();
    let cols = width.min(n);
    (0..cols)
        .map(|c| {
            // Each column shows the largest value of the samples it covers, so peaks stay visible.
            let (a, b) = (c * n / cols, ((c + 1) * n / cols).max(c * n / cols + 1));
            let v = vals[a..b.min(n)]
                .iter()
                .flatten()
                .fold(None, |m: Option<f64>, &x| Some(m.map_or(x, |m| m.max(x))));
            match v {
                None => ' ',
                Some(v) if max <= 0.0 => SPARKS[0].min(if v > 0.0 { SPARKS[7] } else { SPARKS[0] }),
                Some(v) => SPARKS[((v / max).clamp(0.0, 1.0) * 7.0).round() as usize],
            }
        })
        .collect()
}

fn node_view(n: &NodeSummary, width: usize) -> Value {
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
    let mut v = json!({
        "name": clean(&n.node, 64),
        "cpu_spark": sparkline(&busy, cores, width),
        "mem_spark": sparkline(&mem, mem_max, width),
    });
    merge(&mut v, node_figures(n, usize::MAX));
    v
}

fn or_na(v: Option<String>) -> String {
    v.unwrap_or_else(|| "n/a".into())
}

/// Adds `extra`'s fields to the object `v`.
pub fn merge(v: &mut Value, extra: Map<String, Value>) {
    if let Some(o) = v.as_object_mut() {
        o.extend(extra);
    }
}

/// The formatted figures of one node that every report view shows (text report, HTML mail),
/// with at most `max_steps` step rows.
pub fn node_figures(n: &NodeSummary, max_steps: usize) -> Map<String, Value> {
    let v = json!({
        "cores": or_na(n.alloc_cores.map(|c| c.to_string())),
        "cpu_time": fmt_secs(n.cpu.usage_s),
        "cpu_efficiency": fmt_pct(n.cpu_efficiency_pct),
        "mem_peak": fmt_bytes(n.mem.peak_bytes),
        "samples": n.quality.samples,
        "steps": n.steps.iter().take(max_steps).map(|s| json!({
            "name": clean(&s.step, 32),
            "elapsed": or_na(s.elapsed_s.map(fmt_duration)),
            "cpu_time": fmt_secs(s.cpu_s),
            "mem_peak": fmt_bytes(s.mem_peak_bytes),
            "exit": or_na(s.exit_status.map(|e| e.to_string())),
        })).collect::<Vec<_>>(),
    });
    match v {
        Value::Object(m) => m,
        _ => unreachable!("json! object"),
    }
}

/// The formatted job figures every report view shows (text report, HTML mail): one place, so the
/// text and HTML parts of a mail cannot disagree.
pub fn job_figures(s: &JobSummary) -> Map<String, Value> {
    let v = json!({
        "elapsed": fmt_duration(s.elapsed_s),
        "nodes_count": s.alloc.nodes,
        "cores": or_na(s.alloc.cores.map(|c| c.to_string())),
        "mem_alloc": fmt_bytes(s.alloc.mem_per_node_bytes),
        // SLURM_JOB_GPUS lists gres indices ("0,1"): say how many, then which.
        "gpus_alloc": s.alloc.gpus.as_deref().filter(|g| !g.is_empty()).map(|g| match jobscope_core::slurm::cpulist_count(g) {
            Some(n) => format!("{n} (gres index {})", clean(g, 64)),
            None => clean(g, 64),
        }).unwrap_or_else(|| "none".into()),
        "cpu_time": fmt_secs(s.cpu.usage_s),
        "cpu_user": fmt_secs(s.cpu.user_s),
        "cpu_system": fmt_secs(s.cpu.system_s),
        "cpu_efficiency": fmt_pct(s.efficiency.cpu_pct),
        "mem_peak": fmt_bytes(s.mem.peak_bytes),
        "mem_efficiency": fmt_pct(s.efficiency.mem_pct),
        "mem_rss": fmt_bytes(s.mem.rss_peak_bytes),
        "mem_cache": fmt_bytes(s.mem.cache_peak_bytes),
        "mem_shmem": fmt_bytes(s.mem.shmem_peak_bytes),
        "oom_kills": or_na(s.mem.oom_kill_events.map(|o| o.to_string())),
        "time_efficiency": fmt_pct(s.efficiency.time_pct),
        "io_read": fmt_bytes(s.io.read_bytes),
        "io_write": fmt_bytes(s.io.write_bytes),
        "io_peak": or_na(s.io.peak_bytes_per_s.map(|r| format!("{}/s", fmt_bytes(Some(r as u64))))),
        "samples": s.samples,
        "partial": s.partial,
    });
    match v {
        Value::Object(m) => m,
        _ => unreachable!("json! object"),
    }
}

/// The view model of the text report.
pub fn view(s: &JobSummary) -> Value {
    let width = 48;
    let a = s.analysis.clone().unwrap_or_default();
    let mut v = json!({
        "job_id": s.job_id,
        "name": clean(s.name.as_deref().unwrap_or("(unknown)"), 120),
        "user": clean(s.user.as_deref().unwrap_or("(unknown)"), 64),
        "cluster": clean(s.cluster.as_deref().unwrap_or("-"), 64),
        "partition": clean(s.partition.as_deref().unwrap_or("-"), 64),
        "state": clean(&s.state, 32),
        "state_reason": s.state_reason.as_deref().map(|r| clean(r, 200)).unwrap_or_default(),
        "time_limit": s.alloc.time_limit_s.map(|t| format!("of a {} limit", fmt_duration(t as f64))).unwrap_or_else(|| "no time limit".into()),
        "io_source": s.io.source.clone().unwrap_or_else(|| "n/a".into()),
        "partial_reasons": s.partial_reasons.iter().map(|r| clean(r, 300)).collect::<Vec<_>>(),
        // Data-quality notes (a GPU that could not be identified, NVML timeouts, unreadable files).
        "notes": s.nodes.iter().flat_map(|n| n.quality.notes.iter().filter(|x| !x.contains("No such file")).take(10).map(move |x| clean(&format!("{}: {x}", n.node), 300))).collect::<Vec<_>>(),
        "nodes": s.nodes.iter().map(|n| node_view(n, width)).collect::<Vec<_>>(),
        "multi_node": s.nodes.len() > 1,
        "gpus": s.nodes.iter().flat_map(|n| n.gpus.iter()).map(|g| json!({
            "label": clean(&format!("{} GPU {}{}", g.node.as_deref().unwrap_or("?"), g.gres_index.or(g.index).map_or("?".to_string(), |i| i.to_string()), g.name.as_deref().map(|n| format!(" ({n})")).unwrap_or_default()), 120),
            "id": clean(g.uuid.as_deref().or(g.pci_bus_id.as_deref()).unwrap_or("-"), 80),
            "util": if g.utilization_unknown { "unknown (MIG: NVML gives no per-instance utilization)".to_string() } else { format!("mean {}, max {}", fmt_pct(g.util_mean_pct), fmt_pct(g.util_max_pct)) },
            "mem": format!("{} of {}", fmt_bytes(g.mem_peak_bytes), fmt_bytes(g.mem_total_bytes)),
            "energy": g.energy_kwh.map(|e| format!("{}{}", if e >= 1.0 { format!("{e:.2} kWh") } else { format!("{:.1} Wh", e * 1000.0) }, if g.energy_estimated { " (estimated from power)" } else { "" })).unwrap_or_else(|| "n/a".into()),
            "idle": g.idle_s.map(fmt_duration).unwrap_or_else(|| "n/a".into()),
            "wasted": fmt_hours(g.gpu_hours_wasted),
            "findings": g.findings.iter().map(|f| clean(f, 300)).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "waste_gpu_hours": fmt_hours(a.waste.gpu_hours_wasted),
        "alloc_gpu_hours": fmt_hours(a.waste.gpu_hours_allocated),
        "has_gpu_waste": a.waste.gpu_hours_allocated.is_some(),
        "scalability": a.scalability.as_ref().map(|sc| json!({
            "verdict": sc.verdict.replace('_', " "),
            "statement": sc.statement,
            "p50": format!("{:.1}", sc.busy_cores_p50),
            "p95": format!("{:.1}", sc.busy_cores_p95),
            "max": format!("{:.1}", sc.busy_cores_max),
            "mean": format!("{:.1}", sc.busy_cores_mean),
            "one_core_share": format!("{:.0} %", sc.share_time_at_most_one_core_pct),
            "amdahl": sc.amdahl_speedup_ceiling.map(|c| format!("{c:.1}×")).unwrap_or_else(|| "unbounded (no serial phase seen)".into()),
            "timeline": sparkline(&sc.busy_cores_timeline.iter().map(|v| Some(*v)).collect::<Vec<_>>(), sc.allocated_cores.map(|c| c as f64).unwrap_or(sc.busy_cores_max), width),
            "imbalance": sc.imbalance_statement.clone().unwrap_or_default(),
            "node_loads": sc.nodes.iter().map(|l| json!({
                "node": clean(&l.node, 64),
                "cpu": fmt_secs(l.cpu_s),
                "share": l.share_of_mean.map(|r| format!("{:.0} %", r * 100.0)).unwrap_or_else(|| "n/a".into()),
            })).collect::<Vec<_>>(),
        })).unwrap_or(Value::Null),
        "classification": a.classification.class.replace('_', "-"),
        "classification_evidence": a.classification.evidence.join(", "),
        "anomalies": a.anomalies.iter().map(|f| json!({"severity": f.severity.to_uppercase(), "message": clean(&f.message, 400)})).collect::<Vec<_>>(),
        "advice": a.advice.iter().map(|x| json!({"sbatch": x.sbatch, "reason": clean(&x.reason, 400)})).collect::<Vec<_>>(),
        "memory_accounting": a.memory_accounting,
        "waste_core_hours": fmt_hours(a.waste.core_hours_wasted),
        "alloc_core_hours": fmt_hours(a.waste.core_hours_allocated),
        "waste_gb_hours": fmt_hours(a.waste.mem_gb_hours_wasted),
        "alloc_gb_hours": fmt_hours(a.waste.mem_gb_hours_allocated),
    });
    merge(&mut v, job_figures(s));
    v
}

pub fn registry() -> Handlebars<'static> {
    let mut h = Handlebars::new();
    h.set_strict_mode(true);
    h.register_escape_fn(handlebars::no_escape);
    h.register_template_string("report.txt", TEXT_TEMPLATE)
        .expect("built-in text template is valid");
    h
}

/// Renders the text report. `color` adds ANSI bold/colour to headings (only on a TTY without NO_COLOR).
pub fn render_text(s: &JobSummary, color: bool) -> Result<String, handlebars::RenderError> {
    let out = registry().render("report.txt", &view(s))?;
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

    #[test]
    fn formats() {
        assert_eq!(fmt_bytes(Some(600 * 1024 * 1024)), "600.0 MiB");
        assert_eq!(fmt_bytes(Some(12)), "12 B");
        assert_eq!(fmt_bytes(None), "n/a");
        assert_eq!(fmt_duration(3725.0), "1h02m05s");
        assert_eq!(fmt_duration(59.6), "1m00s");
        assert_eq!(fmt_duration(90_000.0), "1d01h00m");
    }

    #[test]
    fn sparkline_keeps_peaks_and_gaps() {
        assert_eq!(
            sparkline(&[Some(0.0), Some(1.0), Some(2.0)], 2.0, 10),
            "▁▅█"
        );
        assert_eq!(sparkline(&[Some(0.0), None, Some(2.0)], 2.0, 10), "▁ █");
        // 100 values squeezed into 10 columns: the single peak survives
        let mut v = vec![Some(0.0); 100];
        v[55] = Some(8.0);
        let s = sparkline(&v, 8.0, 10);
        assert_eq!(s.chars().filter(|&c| c == '█').count(), 1);
    }

    #[test]
    fn clean_strips_control_and_caps() {
        assert_eq!(clean("a\r\nb\x1b[31mc", 100), "ab[31mc");
        assert_eq!(clean(&"x".repeat(10), 4), "xxxx…");
    }
}
