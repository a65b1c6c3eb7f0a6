//! Adaptive thinning: how a spool stays under its byte cap however long the job runs.
//!
//! When the series outgrows its budget the sampler regroups adjacent buckets into fewer, wider ones.
//! Counters keep their last value (cumulative, so nothing is lost) and each gauge keeps its min, max
//! and sum/count over all merged samples, so a one-sample peak survives any number of thinnings.
//! Grouping is by sample count, so after thinning the series is again near-uniform in time resolution.

use super::Bucket;

/// A series point that thinning can merge: how many raw samples it holds, and how to absorb the
/// point that follows it. Implemented by the cgroup series' [`Bucket`] and the GPU series' bucket.
pub trait Mergeable: Clone {
    fn samples(&self) -> u32;
    fn absorb_next(&mut self, next: &Self);
}

impl Mergeable for Bucket {
    fn samples(&self) -> u32 {
        self.n
    }
    fn absorb_next(&mut self, next: &Self) {
        self.absorb(next)
    }
}

/// Regroups `buckets` (in time order) into at most `target` buckets (`target >= 1`).
pub fn thin<T: Mergeable>(buckets: &[T], target: usize) -> Vec<T> {
    let target = target.max(1);
    if buckets.len() <= target {
        return buckets.to_vec();
    }
    let total: u64 = buckets.iter().map(|b| b.samples().max(1) as u64).sum();
    let mut per_group = total.div_ceil(target as u64).max(1);
    loop {
        let out = group(buckets, per_group);
        if out.len() <= target {
            return out;
        }
        per_group = per_group.saturating_mul(2);
    }
}

fn group<T: Mergeable>(buckets: &[T], per_group: u64) -> Vec<T> {
    let mut out: Vec<T> = Vec::new();
    let mut acc: Option<T> = None;
    for b in buckets {
        match acc.as_mut() {
            None => acc = Some(b.clone()),
            Some(a) => a.absorb_next(b),
        }
        if acc
            .as_ref()
            .is_some_and(|a| a.samples() as u64 >= per_group)
        {
            out.extend(acc.take());
        }
    }
    out.extend(acc);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::Reading;
    use crate::spool::{Gauge, GaugeId, N_GAUGES};
    use proptest::prelude::*;

    fn raw(i: u64, mem: u64) -> Bucket {
        let mut gauges = [None; N_GAUGES];
        gauges[GaugeId::MemCurrentBytes as usize] = Some(Gauge::one(mem));
        Bucket {
            t_first_ms: i * 30_000,
            t_last_ms: i * 30_000,
            n: 1,
            last: Reading {
                cpu_usage_ns: Some(i * 1_000),
                mem_current_bytes: Some(mem),
                ..Default::default()
            },
            gauges,
        }
    }

    proptest! {
        #[test]
        fn thinning_keeps_true_peak_and_totals(mems in proptest::collection::vec(0u64..1 << 40, 1..3000), target in 1usize..300) {
            let series: Vec<Bucket> = mems.iter().enumerate().map(|(i, m)| raw(i as u64, *m)).collect();
            let out = thin(&series, target);
            prop_assert!(out.len() <= target.max(1));
            let peak = |bs: &[Bucket]| bs.iter().filter_map(|b| b.gauge(GaugeId::MemCurrentBytes)).map(|g| g.max).max();
            let low = |bs: &[Bucket]| bs.iter().filter_map(|b| b.gauge(GaugeId::MemCurrentBytes)).map(|g| g.min).min();
            prop_assert_eq!(peak(&out), mems.iter().copied().max());
            prop_assert_eq!(low(&out), mems.iter().copied().min());
            let sum: u64 = out.iter().filter_map(|b| b.gauge(GaugeId::MemCurrentBytes)).map(|g| g.sum).sum();
            prop_assert_eq!(sum, mems.iter().sum::<u64>(), "mean is preserved");
            prop_assert_eq!(out.iter().map(|b| b.n as usize).sum::<usize>(), mems.len());
            prop_assert_eq!(out[0].t_first_ms, 0);
            prop_assert_eq!(out.last().unwrap().last.cpu_usage_ns, series.last().unwrap().last.cpu_usage_ns, "final counter kept");
            // repeated thinning (what a long job does) keeps the peak too
            let again = thin(&out, (target / 2).max(1));
            prop_assert_eq!(peak(&again), mems.iter().copied().max());
        }
    }

    #[test]
    fn short_series_untouched() {
        let s = vec![raw(0, 1), raw(1, 2)];
        assert_eq!(thin(&s, 10), s);
    }

    #[test]
    fn missing_counter_in_later_bucket_keeps_earlier_value() {
        let a = raw(0, 1);
        let mut b = raw(1, 2);
        b.last.cpu_usage_ns = None;
        let out = thin(&[a, b], 1);
        assert_eq!(out[0].last.cpu_usage_ns, Some(0));
        assert_eq!(out[0].last.mem_current_bytes, Some(2));
    }
}
