//! Report-level analysis (scalability, classification, anomalies, advice). Filled in by the report work.
use jobscope_core::config::Report;
use jobscope_core::summary::analysis::Analysis;
use jobscope_core::summary::JobSummary;

pub fn analyze(_s: &JobSummary, _cfg: &Report) -> Analysis {
    Analysis::default()
}
