//! The analysis thresholds (`[report]` in the configuration file, documented in
//! docs/configuration.md). Only the values live here; loading the file is `jobscope_config`.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Report {
    /// Advise fewer cores when CPU efficiency is below this (percent).
    pub cpu_efficiency_warn_pct: f64,
    /// Advise less memory when peak memory is below this share of the request (percent).
    pub mem_efficiency_warn_pct: f64,
    /// Headroom added to the observed peak when advising `--mem` (percent).
    pub mem_headroom_pct: f64,
    /// Margin added to the elapsed time when advising `--time` (percent).
    pub time_margin_pct: f64,
    /// Advise a shorter `--time` when the job used less than this share of its limit (percent).
    pub time_efficiency_warn_pct: f64,
    /// A memory peak at or above this share of the limit is "near OOM" (percent).
    pub near_oom_pct: f64,
    /// Jobs shorter than this get no resource advice (too little evidence).
    pub min_elapsed_for_advice_s: u64,
    /// A stretch of near-zero CPU at least this long is reported as an idle phase.
    pub idle_phase_min_s: u64,
    /// A node whose tasks were stalled on CPU, memory or I/O (cgroup v2 pressure stall
    /// information, `some`) for at least this share of its wall time gets a finding (percent).
    pub stall_warn_pct: f64,
    /// A node whose tasks waited for a CPU at least this share of their runnable time (the
    /// kernel view) gets a finding, and the job the class `waiting` (percent).
    pub cpu_wait_warn_pct: f64,
    /// System calls of the synchronisation class (futex…) at least this share of all system calls
    /// (and at least `lock_min_calls` of them) is lock contention (percent).
    pub lock_share_warn_pct: f64,
    pub lock_min_calls: u64,
    /// At least this many reads or writes under 4 KiB get the advice to buffer I/O.
    pub small_io_warn_calls: u64,
    /// Not a threshold: whether whoever archives a job (the Epilog, the collector) also writes its
    /// verdict in one line into SLURM's AdminComment (`jobscope_report::admin_comment`), where
    /// `sacct` shows it. Needs slurmdbd (docs/slurm-versions.md). Off unless the site turns it on.
    pub admin_comment: bool,
}

impl Default for Report {
    fn default() -> Self {
        Report {
            cpu_efficiency_warn_pct: 60.0,
            mem_efficiency_warn_pct: 50.0,
            mem_headroom_pct: 25.0,
            time_margin_pct: 30.0,
            time_efficiency_warn_pct: 40.0,
            near_oom_pct: 90.0,
            min_elapsed_for_advice_s: 60,
            idle_phase_min_s: 600,
            stall_warn_pct: 20.0,
            cpu_wait_warn_pct: 25.0,
            lock_share_warn_pct: 50.0,
            lock_min_calls: 100_000,
            small_io_warn_calls: 1_000_000,
            admin_comment: false,
        }
    }
}
