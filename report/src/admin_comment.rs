//! The job's verdict in one line for SLURM's AdminComment (`[report] admin_comment`,
//! docs/configuration.md; where SLURM keeps it, docs/slurm-versions.md), so that `sacct` shows it
//! without jobscope. Pure: the caller writes it through the SLURM adapter.
//!
//! Format version 1, space-separated `key=value` pairs, first `jobscope=1`:
//!
//! | key | value |
//! |---|---|
//! | `jobscope` | the format's version, `1` |
//! | `state` | jobscope's end state (`COMPLETED`, `OUT_OF_MEMORY`, …, as archived) |
//! | `at` | when the figures were taken ([`Taken`]): `batch_end`, `running` or `archived` |
//! | `partial` | `1` when the report misses nodes (absent otherwise) |
//! | `cpu_eff_pct`, `mem_eff_pct`, `gpu_eff_pct` | efficiencies, whole percent |
//! | `core_h_wasted`, `mem_gb_h_wasted`, `gpu_h_wasted` | waste, one decimal |
//! | `class` | the job's class (`cpu_bound`, `gpu_idle`, … as archived) |
//!
//! A figure that was not measured is left out, never written as 0. Values hold only ASCII
//! letters, digits, `_`, `.` and `-`: no blank, quote, comma or control character, so the line
//! survives SLURM's own parsing of `Key=value` arguments (sacctmgr turns a quote inside a value
//! into a backtick, and takes a leading one as an opening quote) and any exporter splits it on
//! blanks and the first `=`. Nothing the user wrote (job name, comment) goes in. Keys are only
//! ever added; a reader ignores keys it does not know.

use jobscope_model::summary::JobSummary;
use jobscope_model::vocab::Vocabulary;

/// The line's upper bound in bytes, under SLURM's 1 KiB for a job's comment fields.
pub const MAX_BYTES: usize = 1000;

/// When a line's figures were taken: its `at` key (module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// At the batch script's end, by the plugin on the batch host, while slurmctld still lets
    /// the job's record change (docs/slurm-versions.md, "AdminComment"): the state is the one
    /// the script's exit status gives, the figures are those of the nodes reached from there.
    BatchEnd,
    /// A running job's figures so far (`jobscope admin-comment` by hand).
    Running,
    /// The archived report's, written after the job's end into the accounting database.
    Archived,
}

impl Taken {
    pub fn spelling(self) -> &'static str {
        match self {
            Taken::BatchEnd => "batch_end",
            Taken::Running => "running",
            Taken::Archived => "archived",
        }
    }
}

/// The AdminComment line of a job's report (module doc).
pub fn admin_comment(s: &JobSummary, taken: Taken) -> String {
    // `at` before the figures: a line cut at the bound still says what its state means.
    let mut pairs: Vec<(&str, String)> = vec![
        ("jobscope", "1".into()),
        ("state", s.state.to_string()),
        ("at", taken.spelling().into()),
    ];
    if s.partial || !s.missing_nodes.is_empty() {
        pairs.push(("partial", "1".into()));
    }
    let pct = |v: Option<f64>| v.filter(|x| x.is_finite()).map(|x| format!("{x:.0}"));
    let hours = |v: Option<f64>| v.filter(|x| x.is_finite()).map(|x| format!("{x:.1}"));
    let waste = s.analysis.as_ref().map(|a| &a.waste);
    let gpu_eff = waste.and_then(|w| {
        let alloc = w.gpu_hours_allocated.filter(|&a| a > 0.0)?;
        Some(100.0 * w.gpu_hours_used()? / alloc)
    });
    let figures = [
        ("cpu_eff_pct", pct(s.efficiency.cpu_pct)),
        ("mem_eff_pct", pct(s.efficiency.mem_pct)),
        ("gpu_eff_pct", pct(gpu_eff)),
        (
            "core_h_wasted",
            hours(waste.and_then(|w| w.core_hours_wasted)),
        ),
        (
            "mem_gb_h_wasted",
            hours(waste.and_then(|w| w.mem_gb_hours_wasted)),
        ),
        (
            "gpu_h_wasted",
            hours(waste.and_then(|w| w.gpu_hours_wasted)),
        ),
        (
            "class",
            s.analysis
                .as_ref()
                .map(|a| a.classification.class.spelling().to_string()),
        ),
    ];
    pairs.extend(figures.into_iter().filter_map(|(k, v)| Some((k, v?))));
    let mut line = String::new();
    for (k, v) in pairs {
        let v: String = v.chars().filter(|c| safe_char(*c)).collect();
        if v.is_empty() {
            continue;
        }
        let pair = format!("{k}={v}");
        // Whole pairs only: a reader never sees a cut figure.
        if line.len() + 1 + pair.len() > MAX_BYTES {
            break;
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&pair);
    }
    line
}

/// The characters a value may hold (module doc).
fn safe_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')
}

#[cfg(test)]
mod tests {
    use super::*;
    use jobscope_model::job::JobState;
    use jobscope_model::summary::analysis::{Analysis, Classification, JobClass, Waste};

    /// A job summary with only what the line reads (the archive's JSON of a real job in
    /// report/testdata/ would do too; these figures are chosen by hand).
    fn summary() -> JobSummary {
        let mut s: JobSummary = serde_json::from_value(serde_json::json!({
            "schema_version": 2, "generator": "t", "cluster": null, "job_id": 7,
            "array_job_id": null, "array_task_id": null, "name": null, "user": null,
            "uid": null, "gid": null, "group": null, "account": null, "partition": null,
            "qos": null, "submit_unix_s": null, "state": "COMPLETED", "end_reason": null,
            "exit_code": 0, "start_unix_ms": 0, "end_unix_ms": 3600000, "elapsed_s": 3600.0,
            "scheduler_start_unix_s": null,
            "alloc": {"nodes": 1, "cores": 4, "mem_per_node_bytes": null, "gpus": null, "time_limit_s": null},
            "cpu": {}, "mem": {}, "io": {}, "pressure": null, "kernel": null,
            "efficiency": {"cpu_pct": 12.4, "mem_pct": 39.6, "time_pct": null},
            "nodes": [], "missing_nodes": [], "partial": false, "partial_reasons": [],
            "samples": 60, "user_options": {}, "analysis": null
        }))
        .unwrap();
        s.analysis = Some(Analysis {
            waste: Waste {
                core_hours_allocated: Some(4.0),
                core_hours_used: Some(0.5),
                core_hours_wasted: Some(3.5),
                gpu_hours_allocated: Some(2.0),
                gpu_hours_wasted: Some(1.94),
                ..Default::default()
            },
            classification: Classification {
                class: JobClass::GpuIdle,
                ..Default::default()
            },
            ..Default::default()
        });
        s
    }

    #[test]
    fn the_line_of_a_job() {
        assert_eq!(
            admin_comment(&summary(), Taken::Archived),
            "jobscope=1 state=COMPLETED at=archived cpu_eff_pct=12 mem_eff_pct=40 gpu_eff_pct=3 \
             core_h_wasted=3.5 gpu_h_wasted=1.9 class=gpu_idle"
        );
        let mut running = summary();
        running.state = JobState::Running;
        running.analysis = None;
        assert_eq!(
            admin_comment(&running, Taken::BatchEnd),
            "jobscope=1 state=RUNNING at=batch_end cpu_eff_pct=12 mem_eff_pct=40"
        );
    }

    #[test]
    fn what_was_not_measured_is_left_out() {
        let mut s = summary();
        s.efficiency.cpu_pct = None;
        s.efficiency.mem_pct = Some(f64::NAN);
        s.analysis = None;
        s.state = JobState::OutOfMemory;
        s.missing_nodes = vec!["n2".into()];
        assert_eq!(
            admin_comment(&s, Taken::Archived),
            "jobscope=1 state=OUT_OF_MEMORY at=archived partial=1"
        );
    }

    /// The user's words never reach the line: a hostile name, account and comment-like options
    /// leave it as it was, one line of safe characters under the bound.
    #[test]
    fn hostile_input_changes_nothing() {
        let plain = admin_comment(&summary(), Taken::Archived);
        let mut s = summary();
        let hostile = format!("x\" AdminComment='y'\n\r\t,=;{}", "é\u{202e}".repeat(5000));
        s.name = Some(hostile.clone());
        s.account = Some(hostile.clone());
        s.partition = Some(hostile.clone());
        s.user_options.insert(hostile.clone(), hostile);
        let line = admin_comment(&s, Taken::Archived);
        assert_eq!(line, plain);
        assert!(line.len() < 1024);
        assert!(line
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.-= ".contains(c)));
    }

    #[test]
    fn huge_figures_stay_whole_pairs_under_the_bound() {
        let mut s = summary();
        s.efficiency.cpu_pct = Some(1e300);
        if let Some(a) = s.analysis.as_mut() {
            a.waste.core_hours_wasted = Some(1e300);
            a.waste.mem_gb_hours_wasted = Some(-1e300);
            a.waste.gpu_hours_wasted = Some(1e300);
        }
        let line = admin_comment(&s, Taken::Archived);
        assert!(line.len() <= MAX_BYTES, "{}", line.len());
        assert!(line.starts_with("jobscope=1 state=COMPLETED at=archived "));
        // Each pair is key=value with a value, none cut.
        for pair in line.split(' ') {
            let (k, v) = pair.split_once('=').unwrap();
            assert!(!k.is_empty() && !v.is_empty(), "{pair}");
        }
        // 1e300 with one decimal is 302 characters: three such pairs do not all fit.
        assert!(!line.contains("class="), "{line}");
    }
}
