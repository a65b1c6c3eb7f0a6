//! Aggregate OpenMetrics for Prometheus, as a node_exporter textfile written atomically after each
//! index update. Counters (totals over the whole index) and a histogram of CPU efficiency per
//! cluster and partition, and per user only when `audit.metrics_user_label` is on. Never a job id
//! label: one series per job would grow without bound.

use super::query::{GroupKey, Query, Report};
use super::table::{Table, Value};
use anyhow::Result;
use std::fmt::Write;

/// Upper bounds of the CPU-efficiency histogram, percent.
pub const EFF_BUCKETS: [f64; 6] = [10.0, 25.0, 50.0, 75.0, 90.0, 100.0];

/// The usage query the counters come from.
pub fn usage_query(user_label: bool) -> Query {
    let mut q = Query::new(Report::Usage);
    q.group_by = vec![GroupKey::Cluster, GroupKey::Partition];
    if user_label {
        q.group_by.push(GroupKey::User);
    }
    q
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn labels(row: &[Value], n_keys: usize, names: &[&str]) -> String {
    let parts: Vec<String> = names
        .iter()
        .zip(row.iter().take(n_keys))
        .map(|(n, v)| format!("{n}=\"{}\"", escape(v.as_str().unwrap_or(""))))
        .collect();
    parts.join(",")
}

/// One histogram per group: (labels, bucket counts (cumulative), count, sum).
pub type Histograms = Vec<(Vec<String>, [u64; 6], u64, f64)>;

/// The textfile: counters from `usage` (grouped as [`usage_query`]) and the efficiency histograms.
pub fn render(usage: &Table, hist: &Histograms, user_label: bool) -> Result<String> {
    let names: Vec<&str> = if user_label {
        vec!["cluster", "partition", "user"]
    } else {
        vec!["cluster", "partition"]
    };
    let k = names.len();
    let mut out = String::new();
    let counters: [(&str, &str, &str); 10] = [
        ("jobs", "jobscope_jobs", "Jobs archived."),
        (
            "core_hours_alloc",
            "jobscope_core_hours_allocated",
            "Core-hours allocated.",
        ),
        (
            "core_hours_used",
            "jobscope_core_hours_used",
            "Core-hours of CPU time used.",
        ),
        (
            "core_hours_wasted",
            "jobscope_core_hours_wasted",
            "Core-hours allocated but not used.",
        ),
        (
            "mem_gb_hours_alloc",
            "jobscope_mem_gb_hours_allocated",
            "Memory GiB-hours allocated.",
        ),
        (
            "mem_gb_hours_wasted",
            "jobscope_mem_gb_hours_wasted",
            "Memory GiB-hours allocated above the peak.",
        ),
        (
            "gpu_hours_alloc",
            "jobscope_gpu_hours_allocated",
            "GPU-hours allocated.",
        ),
        (
            "gpu_hours_wasted",
            "jobscope_gpu_hours_wasted",
            "GPU-hours idle or never used.",
        ),
        (
            "gpu_energy_kwh",
            "jobscope_gpu_energy_kwh",
            "GPU energy, kWh.",
        ),
        (
            "cpu_wait_hours",
            "jobscope_cpu_wait_hours",
            "Hours the jobs' tasks were runnable but waiting for a CPU (the kernel view).",
        ),
    ];
    for (col, metric, help) in counters {
        let Some(c) = usage.column(col) else { continue };
        writeln!(out, "# HELP {metric} {help}")?;
        writeln!(out, "# TYPE {metric} counter")?;
        for row in &usage.rows {
            let v = row[c].as_f64().unwrap_or(0.0);
            writeln!(out, "{metric}_total{{{}}} {v}", labels(row, k, &names))?;
        }
    }
    let metric = "jobscope_job_cpu_efficiency_pct";
    writeln!(
        out,
        "# HELP {metric} CPU efficiency of archived jobs, percent of allocated core-time."
    )?;
    writeln!(out, "# TYPE {metric} histogram")?;
    for (lv, buckets, count, sum) in hist {
        let l: Vec<String> = names
            .iter()
            .zip(lv)
            .map(|(n, v)| format!("{n}=\"{}\"", escape(v)))
            .collect();
        let l = l.join(",");
        for (b, n) in EFF_BUCKETS.iter().zip(buckets) {
            writeln!(out, "{metric}_bucket{{{l},le=\"{b}\"}} {n}")?;
        }
        writeln!(out, "{metric}_bucket{{{l},le=\"+Inf\"}} {count}")?;
        writeln!(out, "{metric}_count{{{l}}} {count}")?;
        writeln!(out, "{metric}_sum{{{l}}} {sum}")?;
    }
    out.push_str("# EOF\n");
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{ColType, Column};

    #[test]
    fn counters_and_histogram_without_job_ids_and_escaped() {
        let q = usage_query(false);
        let mut t = Table::new(q.columns());
        let mut row = vec![Value::Text("c1".into()), Value::Text("gp\"u".into())];
        row.extend((0..t.columns.len() - 2).map(|i| {
            if i == 0 {
                Value::Int(3)
            } else {
                Value::Float(1.5)
            }
        }));
        t.rows.push(row);
        assert_eq!(
            t.columns[2],
            Column::new("jobs", ColType::Int, crate::table::Unit::None)
        );
        let hist: Histograms = vec![(
            vec!["c1".into(), "gp\"u".into()],
            [0, 1, 2, 2, 3, 3],
            3,
            140.0,
        )];
        let s = render(&t, &hist, false).unwrap();
        assert!(
            s.contains("jobscope_jobs_total{cluster=\"c1\",partition=\"gp\\\"u\"} 3\n"),
            "{s}"
        );
        assert!(s.contains(
            "jobscope_core_hours_allocated_total{cluster=\"c1\",partition=\"gp\\\"u\"} 1.5\n"
        ));
        assert!(s.contains("jobscope_job_cpu_efficiency_pct_bucket{cluster=\"c1\",partition=\"gp\\\"u\",le=\"25\"} 1\n"), "{s}");
        assert!(s.contains("_count{cluster=\"c1\",partition=\"gp\\\"u\"} 3\n"));
        assert!(!s.contains("job_id"));
        assert!(s.ends_with("# EOF\n"));
    }
}
