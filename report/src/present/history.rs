//! Words for what the Epilog adds from the audit index: the peer percentile and the advice from a
//! user's earlier runs (archive/src/history.rs).

use super::format::{fmt_bytes, fmt_duration, fmt_pct};
use super::AdviceView;
use jobscope_model::summary::analysis::{HistoryAdvice, HistoryBasis, PeerMetric, PeerRank};

/// `1st`, `2nd`, `3rd`, `4th`, `11th`, `12th`, `13th`, `21st`.
pub fn ordinal(n: u32) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// "CPU efficiency 31.0 %: 12th percentile of debug-partition jobs in the last 30 days (median
/// 54.0 %, 240 jobs)".
pub fn peer(p: &PeerRank) -> String {
    let what = match p.metric {
        PeerMetric::CpuEfficiency => "CPU efficiency",
        PeerMetric::MemEfficiency => "Memory efficiency",
    };
    format!(
        "{what} {}: {} percentile of {}-partition jobs in the last {} days (median {}, {} jobs)",
        fmt_pct(Some(p.value_pct)),
        ordinal(p.percentile.round().clamp(0.0, 100.0) as u32),
        p.partition,
        p.window_days,
        fmt_pct(Some(p.median_pct)),
        p.cohort_jobs
    )
}

/// The history heading: `Based on your last 12 runs of "train":`, or, when the runs were matched by
/// their batch script, `Based on your last 7 runs of the same batch script:`.
pub fn history_heading(h: &HistoryAdvice) -> String {
    match h.basis {
        HistoryBasis::SameName => format!("Based on your last {} runs of \"{}\":", h.runs, h.name),
        HistoryBasis::SameScript => {
            format!(
                "Based on your last {} runs of the same batch script:",
                h.runs
            )
        }
    }
}

/// `over 12 runs of the same name` / `over 7 runs of the same script`: what the figures rest on.
fn over_runs(h: &HistoryAdvice) -> String {
    let same = match h.basis {
        HistoryBasis::SameName => "name",
        HistoryBasis::SameScript => "script",
    };
    format!("over {} runs of the same {same}", h.runs)
}

/// One `#SBATCH` line per figure, with what it rests on.
pub fn history_lines(h: &HistoryAdvice) -> Vec<AdviceView> {
    let mut out = Vec::new();
    if let (Some(r), Some(p)) = (h.mem_request, h.mem_peak_p95_bytes) {
        out.push(AdviceView {
            line: r.sbatch_line(),
            reason: format!(
                "p95 peak {} {}, with headroom",
                fmt_bytes(Some(p)),
                over_runs(h)
            ),
        });
    }
    if let (Some(r), Some(e)) = (h.time_request, h.elapsed_p95_s) {
        out.push(AdviceView {
            line: r.sbatch_line(),
            reason: format!(
                "p95 elapsed {} {}, with a margin",
                fmt_duration(e),
                over_runs(h)
            ),
        });
    }
    if let (Some(r), Some(b)) = (h.cpus_request, h.busy_cores_p95) {
        out.push(AdviceView {
            line: r.sbatch_line(),
            reason: format!("p95 busy cores {b:.1} {}", over_runs(h)),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use jobscope_model::summary::analysis::Request;

    #[test]
    fn ordinals() {
        let got: Vec<String> = [1, 2, 3, 4, 11, 12, 13, 21, 22, 100].map(ordinal).to_vec();
        assert_eq!(
            got,
            ["1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "100th"]
        );
    }

    #[test]
    fn peer_sentence_and_history_lines() {
        let p = PeerRank {
            metric: PeerMetric::CpuEfficiency,
            value_pct: 31.0,
            percentile: 12.4,
            median_pct: 54.0,
            partition: "debug".into(),
            cohort_jobs: 240,
            window_days: 30,
        };
        assert_eq!(
            peer(&p),
            "CPU efficiency 31.0 %: 12th percentile of debug-partition jobs in the last 30 days (median 54.0 %, 240 jobs)"
        );
        let h = HistoryAdvice {
            name: "train".into(),
            basis: HistoryBasis::SameName,
            runs: 12,
            mem_peak_p95_bytes: Some(3_328_599_655),
            mem_request: Some(Request::MemMib(4096)),
            elapsed_p95_s: None,
            time_request: None,
            busy_cores_p95: Some(1.4),
            cpus_request: Some(Request::CpusPerTask(2)),
        };
        assert_eq!(
            history_heading(&h),
            "Based on your last 12 runs of \"train\":"
        );
        assert!(!history_heading(&h).starts_with("From "));
        let l = history_lines(&h);
        assert_eq!(l.len(), 2);
        assert_eq!(l[0].line, "#SBATCH --mem=4G");
        assert_eq!(
            l[0].reason,
            "p95 peak 3.1 GiB over 12 runs of the same name, with headroom"
        );
        assert_eq!(l[1].line, "#SBATCH --cpus-per-task=2");
        assert_eq!(
            l[1].reason,
            "p95 busy cores 1.4 over 12 runs of the same name"
        );
        let by_script = HistoryAdvice {
            basis: HistoryBasis::SameScript,
            runs: 7,
            ..h
        };
        assert_eq!(
            history_heading(&by_script),
            "Based on your last 7 runs of the same batch script:"
        );
        assert_eq!(
            history_lines(&by_script)[0].reason,
            "p95 peak 3.1 GiB over 7 runs of the same script, with headroom"
        );
        // Mailed as text/plain: a line starting "From " comes out of an mbox as ">From ".
        assert!(!history_heading(&by_script).starts_with("From "));
    }
}
