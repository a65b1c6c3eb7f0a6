//! Small per-cohort distributions for the end-of-job report's peer percentile ("CPU efficiency
//! 31 %: 12th percentile of debug-partition jobs in the last 30 days (median 54 %)"). The indexer
//! writes `<index>/cohorts.json` after each update: per (cluster, partition), the jobs of the last
//! `audit.peer_window_days` and 101 quantiles (p0…p100) of their CPU and memory efficiency. The
//! Epilog reads only that file: a bounded cost at job end, whatever the archive's size.

use jobscope_model::summary::analysis::{PeerMetric, PeerRank};
use serde::{Deserialize, Serialize};

pub const COHORTS: &str = "cohorts.json";
/// A cohorts file larger than this is not read by the Epilog.
pub const MAX_COHORTS_BYTES: u64 = 4 * 1024 * 1024;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Dist {
    /// Jobs with the figure.
    pub jobs: u64,
    /// p0, p1, …, p100 (101 values) when `jobs > 0`.
    pub quantiles: Vec<f64>,
}

impl Dist {
    /// 101 quantiles of `vals` (nearest rank on the sorted values).
    pub fn of(mut vals: Vec<f64>) -> Dist {
        vals.retain(|v| v.is_finite());
        vals.sort_by(f64::total_cmp);
        let n = vals.len();
        let quantiles = if n == 0 {
            Vec::new()
        } else {
            (0..=100)
                .map(|p| vals[((p as f64 / 100.0) * (n - 1) as f64).round() as usize])
                .collect()
        };
        Dist {
            jobs: n as u64,
            quantiles,
        }
    }

    /// Where `x` falls: the share of the cohort below it, counting ties half (0–100).
    pub fn percentile(&self, x: f64) -> Option<f64> {
        if self.quantiles.len() != 101 || !x.is_finite() {
            return None;
        }
        let below = self.quantiles.iter().filter(|&&q| q < x).count() as f64;
        let equal = self.quantiles.iter().filter(|&&q| q == x).count() as f64;
        Some(((below + equal / 2.0) / 101.0 * 100.0).clamp(0.0, 100.0))
    }

    pub fn median(&self) -> Option<f64> {
        self.quantiles.get(50).copied()
    }

    /// What an indexer can have written: no jobs and no quantiles, or jobs and 101 ascending
    /// efficiencies within [`EFFICIENCY_PCT`]. The file is read by root's Epilog and printed to
    /// users, so a damaged or forged one must not reach a report.
    pub fn is_sane(&self) -> bool {
        if self.jobs == 0 {
            return self.quantiles.is_empty();
        }
        self.quantiles.len() == 101
            && self.quantiles.iter().all(|q| EFFICIENCY_PCT.contains(q))
            && self.quantiles.windows(2).all(|w| w[0] <= w[1])
    }
}

/// The efficiencies a cohort can hold, in percent: CPU efficiency passes 100 a little when the
/// kernel charges more than the allocated cores (a cgroup on v1 without a CPU limit), never tenfold.
pub const EFFICIENCY_PCT: std::ops::RangeInclusive<f64> = 0.0..=1000.0;
/// The longest window a cohorts file may claim: the configuration's bound on
/// `audit.peer_window_days`.
pub const MAX_WINDOW_DAYS: u32 = 3650;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cohort {
    pub cluster: Option<String>,
    pub partition: Option<String>,
    pub cpu_eff_pct: Dist,
    pub mem_eff_pct: Dist,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cohorts {
    pub generated_unix_s: i64,
    pub window_days: u32,
    pub cohorts: Vec<Cohort>,
}

impl Cohorts {
    /// Every cohort sane and the window one the configuration allows (see [`Dist::is_sane`]).
    pub fn is_sane(&self) -> bool {
        (1..=MAX_WINDOW_DAYS).contains(&self.window_days)
            && self
                .cohorts
                .iter()
                .all(|c| c.cpu_eff_pct.is_sane() && c.mem_eff_pct.is_sane())
    }

    /// The job's percentile in its cluster and partition, when the cohort has at least `min_jobs`.
    pub fn rank(
        &self,
        cluster: Option<&str>,
        partition: Option<&str>,
        cpu_eff_pct: Option<f64>,
        mem_eff_pct: Option<f64>,
        min_jobs: u32,
    ) -> Vec<PeerRank> {
        let Some(c) = self
            .cohorts
            .iter()
            .find(|c| c.cluster.as_deref() == cluster && c.partition.as_deref() == partition)
        else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (metric, d, v) in [
            (PeerMetric::CpuEfficiency, &c.cpu_eff_pct, cpu_eff_pct),
            (PeerMetric::MemEfficiency, &c.mem_eff_pct, mem_eff_pct),
        ] {
            let (Some(v), Some(median)) = (v, d.median()) else {
                continue;
            };
            if d.jobs < u64::from(min_jobs) {
                continue;
            }
            if let Some(p) = d.percentile(v) {
                out.push(PeerRank {
                    metric,
                    value_pct: v,
                    percentile: p,
                    median_pct: median,
                    partition: partition.unwrap_or_default().to_string(),
                    cohort_jobs: d.jobs,
                    window_days: self.window_days,
                });
            }
        }
        out
    }
}

/// Reads `<index_dir>/cohorts.json` (bounded, no link, no FIFO); `None` when it is missing or
/// cannot be read or decoded. The Epilog keeps it only when [`Cohorts::is_sane`].
pub fn read(index_dir: &std::path::Path) -> Option<Cohorts> {
    let b =
        jobscope_common::fsutil::read_limited(&index_dir.join(COHORTS), MAX_COHORTS_BYTES).ok()?;
    serde_json::from_slice(&b).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_and_percentiles_of_a_known_cohort() {
        // 1, 2, …, 201: p50 is 101, p0 1, p100 201; every quantile is 1 + 2k.
        let d = Dist::of((1..=201).map(f64::from).collect());
        assert_eq!(d.jobs, 201);
        assert_eq!(d.quantiles.len(), 101);
        assert_eq!(d.median(), Some(101.0));
        assert_eq!(d.quantiles[0], 1.0);
        assert_eq!(d.quantiles[100], 201.0);
        // 26 lies between q12 = 25 and q13 = 27: 13 quantiles below → 12.9th percentile.
        let p = d.percentile(26.0).unwrap();
        assert!((p - 13.0 / 101.0 * 100.0).abs() < 1e-9, "{p}");
        assert_eq!(d.percentile(0.0), Some(0.0));
        assert_eq!(d.percentile(1000.0), Some(100.0));
    }

    #[test]
    fn damaged_cohorts_are_not_sane() {
        let good = Cohorts {
            generated_unix_s: 0,
            window_days: 30,
            cohorts: vec![Cohort {
                cluster: None,
                partition: Some("debug".into()),
                cpu_eff_pct: Dist::of((0..200).map(f64::from).map(|x| x / 2.0).collect()),
                mem_eff_pct: Dist::of(vec![]),
            }],
        };
        assert!(good.is_sane());
        let mut huge = good.clone();
        huge.cohorts[0].cpu_eff_pct.quantiles[50] = 1e308;
        let mut window = good.clone();
        window.window_days = u32::MAX;
        let mut unsorted = good.clone();
        unsorted.cohorts[0].cpu_eff_pct.quantiles.swap(3, 90);
        let mut short = good.clone();
        short.cohorts[0].cpu_eff_pct.quantiles.pop();
        let mut nan = good.clone();
        nan.cohorts[0].cpu_eff_pct.quantiles[100] = f64::NAN;
        let mut jobs_without = good.clone();
        jobs_without.cohorts[0].mem_eff_pct.jobs = 5;
        for (what, c) in [
            ("median 1e308", huge),
            ("window u32::MAX", window),
            ("unsorted", unsorted),
            ("100 quantiles", short),
            ("NaN", nan),
            ("jobs without quantiles", jobs_without),
        ] {
            assert!(!c.is_sane(), "{what} passed");
        }
    }

    #[test]
    fn thin_cohorts_give_no_rank() {
        let c = Cohorts {
            generated_unix_s: 0,
            window_days: 30,
            cohorts: vec![Cohort {
                cluster: Some("c".into()),
                partition: Some("debug".into()),
                cpu_eff_pct: Dist::of(vec![10.0, 20.0, 30.0]),
                mem_eff_pct: Dist::of(vec![]),
            }],
        };
        assert!(c
            .rank(Some("c"), Some("debug"), Some(15.0), Some(5.0), 4)
            .is_empty());
        let r = c.rank(Some("c"), Some("debug"), Some(15.0), Some(5.0), 3);
        assert_eq!(r.len(), 1, "memory has no jobs: only CPU");
        assert_eq!(r[0].median_pct, 20.0);
        assert!(c
            .rank(Some("c"), Some("other"), Some(15.0), None, 1)
            .is_empty());
    }
}
