//! What the Epilog adds from history, at a bounded cost: the peer percentile (from
//! `<index>/cohorts.json`, see [`super::peer`]) and right-sizing from the user's earlier runs of the
//! same job (from `<index>/history/<uid>.json`, written by the index update (`jobscope_audit::history`): per job name
//! and per batch-script hash, the last [`MAX_RUNS`] runs of the last [`HISTORY_DAYS`] days). The
//! Epilog reads two small files; with no index, or thin history, it adds nothing. Nothing here can
//! fail a report.
//!
//! "The same job" is first the same batch script (`script_sha256`, recorded by the plugin: the same
//! script under any name), and, when that gives too few runs (a script just edited, a job with no
//! batch script), the same name. The advice says which.

use crate::peer::Cohorts;
use jobscope_config::Config;
use jobscope_model::summary::analysis::{
    mem_flag_mib, time_flag_s, HistoryAdvice, HistoryBasis, Request,
};
use jobscope_model::summary::JobSummary;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const HISTORY_DIR: &str = "history";
pub const HISTORY_DAYS: i64 = 180;
pub const MAX_RUNS: usize = 50;
/// Job names, and scripts, kept per user (the most recently run).
pub const MAX_NAMES: usize = 500;
const MAX_HISTORY_BYTES: u64 = 8 * 1024 * 1024;

/// One earlier run: end time, memory peak, elapsed, mean busy cores.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Run {
    pub end_unix_ms: i64,
    pub mem_peak_bytes: Option<u64>,
    pub elapsed_s: f64,
    pub busy_cores: Option<f64>,
}

impl Run {
    /// What a real run can be: a time after 1970, an elapsed time of at most [`MAX_RUN_S`], a
    /// memory peak of at most [`MAX_PEAK_BYTES`], busy cores of at most [`MAX_BUSY_CORES`]. The
    /// file is read by root's Epilog and turned into `#SBATCH` lines: a damaged or forged run
    /// (`elapsed_s: 1e300`) must not reach advice, nor its arithmetic.
    pub fn is_sane(&self) -> bool {
        self.end_unix_ms >= 0
            && (0.0..=MAX_RUN_S).contains(&self.elapsed_s)
            && self.mem_peak_bytes.is_none_or(|b| b <= MAX_PEAK_BYTES)
            && self
                .busy_cores
                .is_none_or(|c| (0.0..=MAX_BUSY_CORES).contains(&c))
    }
}

impl Run {
    /// A run from a job's figures; busy cores are CPU time ÷ elapsed, none for a run of no
    /// elapsed time (one formula for the Epilog's run and the index's).
    pub fn of(
        end_unix_ms: i64,
        mem_peak_bytes: Option<u64>,
        elapsed_s: f64,
        cpu_usage_s: Option<f64>,
    ) -> Run {
        Run {
            end_unix_ms,
            mem_peak_bytes,
            elapsed_s,
            busy_cores: cpu_usage_s
                .filter(|_| elapsed_s > 0.0)
                .map(|c| c / elapsed_s),
        }
    }
}

/// Ten years: longer than any time limit a site sets.
pub const MAX_RUN_S: f64 = 10.0 * 366.0 * 86_400.0;
/// A pebibyte per node.
pub const MAX_PEAK_BYTES: u64 = 1 << 50;
/// More cores than a node has.
pub const MAX_BUSY_CORES: f64 = 1_000_000.0;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UserHistory {
    /// Job name → runs, oldest first.
    pub names: BTreeMap<String, Vec<Run>>,
    /// Batch script's SHA-256 (hex) → runs, oldest first. Absent in files written before scripts
    /// were recorded.
    #[serde(default)]
    pub scripts: BTreeMap<String, Vec<Run>>,
}

impl UserHistory {
    /// Drops every run that is not [`Run::is_sane`], and keys left without runs.
    pub fn keep_sane(&mut self) {
        for m in [&mut self.names, &mut self.scripts] {
            m.values_mut().for_each(|runs| runs.retain(Run::is_sane));
            m.retain(|_, runs| !runs.is_empty());
        }
    }
}

impl UserHistory {
    /// Adds `run` under its job name and under its batch script's hash (each when known).
    pub fn add(&mut self, name: Option<&str>, script_sha256: Option<&str>, run: Run) {
        if let Some(n) = name {
            self.names.entry(n.to_string()).or_default().push(run);
        }
        if let Some(k) = script_sha256 {
            self.scripts.entry(k.to_string()).or_default().push(run);
        }
    }

    /// Drops the runs that ended before `since_unix_ms` (out of the [`HISTORY_DAYS`] window), keys
    /// left without runs, and bounds what is left ([`bound`]).
    pub fn trim(&mut self, since_unix_ms: i64) {
        for m in [&mut self.names, &mut self.scripts] {
            m.values_mut()
                .for_each(|runs| runs.retain(|r| r.end_unix_ms >= since_unix_ms));
            m.retain(|_, runs| !runs.is_empty());
            bound(m);
        }
    }
}

/// The path of `uid`'s history file under the index directory `index_dir`.
pub fn user_file(index_dir: &std::path::Path, uid: u32) -> std::path::PathBuf {
    index_dir.join(HISTORY_DIR).join(format!("{uid}.json"))
}

/// Reads `uid`'s history file (bounded, no link, no FIFO), keeping only sane runs; `Ok(None)` when
/// there is none, an error naming the file when it cannot be read or decoded.
pub fn read_user(index_dir: &std::path::Path, uid: u32) -> Result<Option<UserHistory>, String> {
    let path = user_file(index_dir, uid);
    match jobscope_common::fsutil::read_limited(&path, MAX_HISTORY_BYTES) {
        Ok(b) => {
            let mut h: UserHistory =
                serde_json::from_slice(&b).map_err(|e| format!("{}: {e}", path.display()))?;
            h.keep_sane();
            Ok(Some(h))
        }
        Err(jobscope_common::fsutil::FsError::Io { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            Ok(None)
        }
        Err(e) => Err(e.to_string()),
    }
}

/// Keeps the last [`MAX_RUNS`] runs of each key, oldest first, and the [`MAX_NAMES`] keys run most
/// recently.
pub fn bound(m: &mut BTreeMap<String, Vec<Run>>) {
    for runs in m.values_mut() {
        runs.sort_by_key(|r| r.end_unix_ms);
        let cut = runs.len().saturating_sub(MAX_RUNS);
        runs.drain(..cut);
    }
    if m.len() > MAX_NAMES {
        let mut by_last: Vec<(i64, String)> = m
            .iter()
            .map(|(k, v)| (v.last().map_or(0, |r| r.end_unix_ms), k.clone()))
            .collect();
        by_last.sort_unstable_by(|a, b| b.cmp(a));
        let keep: std::collections::BTreeSet<String> = by_last
            .into_iter()
            .take(MAX_NAMES)
            .map(|(_, k)| k)
            .collect();
        m.retain(|k, _| keep.contains(k));
    }
}

/// The 95th percentile (nearest rank) of `v`.
fn p95(mut v: Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((0.95 * v.len() as f64).ceil() as usize).clamp(1, v.len());
    Some(v[rank - 1])
}

/// Advice from `runs` (earlier runs and this one), when there are at least `min_runs`. Pure.
pub fn advice_from_runs(
    name: &str,
    basis: HistoryBasis,
    runs: &[Run],
    min_runs: u32,
    cfg: &jobscope_model::params::Report,
) -> Option<HistoryAdvice> {
    if runs.len() < min_runs as usize {
        return None;
    }
    let mem = p95(runs
        .iter()
        .filter_map(|r| r.mem_peak_bytes)
        .map(|b| b as f64)
        .collect());
    let elapsed = p95(runs.iter().map(|r| r.elapsed_s).collect());
    let busy = p95(runs.iter().filter_map(|r| r.busy_cores).collect());
    Some(HistoryAdvice {
        name: name.to_string(),
        basis,
        runs: runs.len() as u32,
        mem_peak_p95_bytes: mem.map(|m| m as u64),
        mem_request: mem
            .map(|m| Request::MemMib(mem_flag_mib(m * (1.0 + cfg.mem_headroom_pct / 100.0)))),
        elapsed_p95_s: elapsed,
        time_request: elapsed
            .map(|e| Request::TimeS(time_flag_s(e * (1.0 + cfg.time_margin_pct / 100.0)))),
        busy_cores_p95: busy,
        cpus_request: busy.map(|b| Request::CpusPerTask((b.ceil() as u32).max(1))),
    })
}

/// Adds the peer percentile and the history-based advice to `s`'s analysis (the Epilog, before
/// archiving). Reads at most two small files; any problem means nothing is added.
pub fn enrich(cfg: &Config, s: &mut JobSummary) {
    let dir = cfg.audit.index_dir(&cfg.paths.archive_dir);
    let Some(a) = s.analysis.as_mut() else { return };
    if a.insufficient_data {
        return;
    }
    let cohorts = crate::peer::read(&dir);
    if let Some(c) = cohorts.filter(Cohorts::is_sane) {
        a.peers = c.rank(
            s.cluster.as_deref(),
            s.partition.as_deref(),
            s.efficiency.cpu_pct,
            s.efficiency.mem_pct,
            cfg.audit.peer_min_jobs,
        );
    }
    let Some(uid) = s.uid else { return };
    if s.name.is_none() && s.script_sha256.is_none() {
        return;
    }
    let Ok(Some(h)) = read_user(&dir, uid) else {
        return;
    };
    let this = Run::of(
        s.end_unix_ms as i64,
        s.mem.peak_bytes,
        s.elapsed_s,
        s.cpu.usage_s,
    );
    a.history = advice_for(
        &h,
        s.name.as_deref(),
        s.script_sha256.as_deref(),
        this,
        cfg.audit.history_min_runs,
        &cfg.report,
    );
}

/// Advice for the run `this` from the user's history `h`: over the earlier runs of the same batch
/// script when, with this one, they are at least `min_runs`; else over those of the same name. A run
/// the history already holds with this run's end time is this run: not counted twice. Pure.
pub fn advice_for(
    h: &UserHistory,
    name: Option<&str>,
    script_sha256: Option<&str>,
    this: Run,
    min_runs: u32,
    cfg: &jobscope_model::params::Report,
) -> Option<HistoryAdvice> {
    let with_this = |earlier: Option<&Vec<Run>>| -> Vec<Run> {
        let mut v: Vec<Run> = earlier
            .map(|v| {
                v.iter()
                    .filter(|r| r.end_unix_ms != this.end_unix_ms)
                    .copied()
                    .collect()
            })
            .unwrap_or_default();
        if !v.is_empty() {
            v.push(this);
        }
        v
    };
    let name_str = name.unwrap_or_default();
    if let Some(k) = script_sha256 {
        let runs = with_this(h.scripts.get(k));
        if let Some(a) = advice_from_runs(name_str, HistoryBasis::SameScript, &runs, min_runs, cfg)
        {
            return Some(a);
        }
    }
    let runs = with_this(name.and_then(|n| h.names.get(n)));
    advice_from_runs(name_str, HistoryBasis::SameName, &runs, min_runs, cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(peak_mib: u64, elapsed_s: f64, busy: f64) -> Run {
        Run {
            end_unix_ms: 0,
            mem_peak_bytes: Some(peak_mib << 20),
            elapsed_s,
            busy_cores: Some(busy),
        }
    }

    /// A damaged or forged history (`elapsed_s: 1e300`, a peak of 2^63 bytes, negative or NaN
    /// figures) gives advice from its sane runs only, and nothing when none is left: never an
    /// `#SBATCH --time` of 213503982334601 days.
    #[test]
    fn runs_no_job_can_have_had_are_dropped_before_advice() {
        let cfg = jobscope_model::params::Report::default();
        let at = |end_unix_ms: i64| Run {
            end_unix_ms,
            ..run(100, 600.0, 1.0)
        };
        let sane = vec![at(1), at(2), at(3)];
        let mut insane = vec![
            run(100, 1e300, 1.0),
            run(100, -5.0, 1.0),
            run(100, f64::NAN, 1.0),
            run(100, 600.0, f64::INFINITY),
            Run {
                mem_peak_bytes: Some(1 << 63),
                ..run(0, 600.0, 1.0)
            },
            Run {
                end_unix_ms: -1,
                ..run(100, 600.0, 1.0)
            },
        ];
        assert!(insane.iter().all(|r| !r.is_sane()));
        assert!(sane.iter().all(Run::is_sane));
        let mut h = UserHistory::default();
        let mut mixed = sane.clone();
        mixed.append(&mut insane.clone());
        h.names.insert("mixed".into(), mixed);
        h.names.insert("forged".into(), insane.clone());
        h.scripts.insert("f".repeat(64), insane.split_off(0));
        h.keep_sane();
        assert_eq!(h.names.get("mixed"), Some(&sane));
        assert!(!h.names.contains_key("forged") && h.scripts.is_empty());
        let this = at(4);
        let got = advice_for(&h, Some("mixed"), None, this, 3, &cfg).unwrap();
        assert_eq!(got.runs, 4);
        assert_eq!(
            got.time_request,
            Some(Request::TimeS(time_flag_s(
                600.0 * (1.0 + cfg.time_margin_pct / 100.0)
            )))
        );
        assert!(advice_for(&h, Some("forged"), None, this, 3, &cfg).is_none());
    }

    #[test]
    fn advice_rests_on_the_p95_of_all_runs() {
        let cfg = jobscope_model::params::Report::default();
        // 20 runs: peaks 100..=2000 MiB; p95 by nearest rank is the 19th, 1900 MiB.
        let runs: Vec<Run> = (1..=20)
            .map(|i| run(i * 100, 600.0 + i as f64, 1.5))
            .collect();
        let by_name = HistoryBasis::SameName;
        assert!(advice_from_runs("x", by_name, &runs[..2], 3, &cfg).is_none());
        let a = advice_from_runs("x", by_name, &runs, 3, &cfg).unwrap();
        assert_eq!(a.runs, 20);
        assert_eq!(a.mem_peak_p95_bytes, Some(1900 << 20));
        let want_mib = mem_flag_mib(1900.0 * 1048576.0 * (1.0 + cfg.mem_headroom_pct / 100.0));
        assert_eq!(a.mem_request, Some(Request::MemMib(want_mib)));
        assert_eq!(a.elapsed_p95_s, Some(619.0));
        assert_eq!(a.cpus_request, Some(Request::CpusPerTask(2)));
    }

    /// Runs of the same script under other names count for this job; a script with too few runs
    /// (edited since) falls back to the name; the advice says which.
    #[test]
    fn the_same_script_under_any_name_else_the_same_name() {
        let cfg = jobscope_model::params::Report::default();
        let at = |end: i64, peak_mib: u64| Run {
            end_unix_ms: end,
            ..run(peak_mib, 600.0, 1.0)
        };
        let (a, b) = ("a".repeat(64), "b".repeat(64));
        let mut h = UserHistory::default();
        // Script a ran as "train" twice and as "train-v2" three times; "train" also ran script b.
        h.names
            .insert("train".into(), vec![at(1, 100), at(2, 100), at(3, 900)]);
        h.names
            .insert("train-v2".into(), vec![at(4, 200), at(5, 200), at(6, 200)]);
        h.scripts.insert(
            a.clone(),
            vec![at(1, 100), at(2, 100), at(4, 200), at(5, 200), at(6, 200)],
        );
        h.scripts.insert(b.clone(), vec![at(3, 900)]);

        // A new name, script a: its 5 earlier runs and this one.
        let got = advice_for(&h, Some("train-v3"), Some(&a), at(7, 300), 3, &cfg).unwrap();
        assert_eq!((got.basis, got.runs), (HistoryBasis::SameScript, 6));
        assert_eq!(got.name, "train-v3");
        // p95 by nearest rank of 100, 100, 200, 200, 200, 300 MiB is the 6th: 300 MiB.
        assert_eq!(got.mem_peak_p95_bytes, Some(300 << 20));

        // Script b has one earlier run (2 with this one, under 3): the name's 3 runs and this one.
        let got = advice_for(&h, Some("train"), Some(&b), at(8, 100), 3, &cfg).unwrap();
        assert_eq!((got.basis, got.runs), (HistoryBasis::SameName, 4));

        // No script recorded (srun job, older plugin): by name.
        let got = advice_for(&h, Some("train-v2"), None, at(9, 100), 3, &cfg).unwrap();
        assert_eq!((got.basis, got.runs), (HistoryBasis::SameName, 4));

        // This run already in the history (same end time) is not counted twice.
        let got = advice_for(&h, None, Some(&a), at(6, 200), 3, &cfg).unwrap();
        assert_eq!(got.runs, 5);
        // Nothing known: nothing said.
        assert!(advice_for(&h, Some("other"), Some(&"c".repeat(64)), at(9, 1), 3, &cfg).is_none());
    }
}
