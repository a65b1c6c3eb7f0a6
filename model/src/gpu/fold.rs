//! Folding the driver's utilization samples into a bucket: what makes a bucket's GPU utilization
//! cover the whole interval instead of the instant of one read.
//!
//! # Why
//! `nvmlDeviceGetUtilizationRates` describes only the last fraction of a second before the read,
//! so a GPU busy in periodic bursts reads anywhere from 0 to 100 % depending on the phase (on an
//! H100, a job 20 % busy in 6 s bursts every 30 s read 0 % at every one of its reads: see
//! docs/gpu.md). The driver also keeps a short buffer of utilization samples (one every 200 ms,
//! 71 of them on the H100: 14 s), read with `nvmlDeviceGetSamples` since a timestamp. The GPU
//! monitor (`sampler/src/gpu/monitor.rs`) drains that buffer more often than it fills and folds every
//! drain into the bucket of the cadence slot: the bucket's utilization gauge then holds one value
//! per 200 ms sample of the interval (evenly spaced, so the gauge's mean is the time-weighted
//! mean), its min and max the interval's extremes.
//!
//! Where the buffer is not supported the drain is a point read (`source` [`UtilSource::Point`]),
//! and the bucket says so ([`UTIL_FROM_POINT_READS`]) so the report can say its utilization may
//! miss bursts between reads.
//!
//! # The job's share of a shared GPU
//! `nvmlDeviceGetProcessUtilization` gives per-process SM and memory utilization samples since a
//! timestamp (only processes with non-zero utilization). Per drain, the job's share is the SM (or
//! memory) utilization of the job's own pids over that of all processes; the job's utilization is
//! the device's samples of the drain times that share. A ratio, so it holds whether the driver
//! returns one entry per process and sample or one per process and query. A drain in which the
//! device was busy but no process reported any utilization leaves the job's figure unknown for
//! those samples (never 0).

use super::spool::DeviceBucket;
use crate::spool::Gauge;

/// Where a drain's utilization values come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UtilSource {
    /// The driver's sample buffer (`nvmlDeviceGetSamples`): every sample since the last drain.
    #[default]
    Buffer,
    /// A point read (`nvmlDeviceGetUtilizationRates`): the buffer is not supported.
    Point,
}

/// One process's utilization sample (`nvmlProcessUtilizationSample_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProcessUtil {
    pub pid: u32,
    /// The driver's CPU timestamp, microseconds.
    pub timestamp_us: u64,
    pub sm_pct: u32,
    pub mem_pct: u32,
}

/// What one drain of one device returned. Timestamps are the driver's (microseconds); values
/// are percent.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeviceDrain {
    pub source: UtilSource,
    /// `(timestamp µs, percent)`, oldest first: GPU (SM) utilization.
    pub util_gpu: Vec<(u64, u32)>,
    /// `(timestamp µs, percent)`: memory-controller utilization.
    pub util_mem: Vec<(u64, u32)>,
    /// Per-process samples since the last drain; `None`: not supported by the device.
    pub processes: Option<Vec<ProcessUtil>>,
}

/// `DeviceBucket::util_flags`: the bucket's utilization includes the driver's sample buffer.
pub const UTIL_FROM_BUFFER: u64 = 1;
/// `DeviceBucket::util_flags`: the bucket's utilization includes point reads.
pub const UTIL_FROM_POINT_READS: u64 = 2;
/// `DeviceBucket::util_flags`: processes other than the job's had SM or memory utilization on
/// the device in the bucket (per-process samples).
pub const UTIL_OTHERS_ACTIVE: u64 = 4;

/// A gap between two buffer samples longer than this is not covered (the buffer overflowed
/// between two drains): the sample after it stands for this much time only.
pub const MAX_SAMPLE_SPACING_MS: u64 = 1_000;

/// The utilization figures of one device over one bucket, folded from its drains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IntervalFigures {
    pub util_gpu_pct: Option<Gauge>,
    pub util_mem_pct: Option<Gauge>,
    pub job_util_gpu_pct: Option<Gauge>,
    pub job_util_mem_pct: Option<Gauge>,
    /// [`UTIL_FROM_BUFFER`] | [`UTIL_FROM_POINT_READS`] | [`UTIL_OTHERS_ACTIVE`].
    pub flags: u64,
    /// Time covered by buffer samples, milliseconds.
    pub covered_ms: u64,
}

impl IntervalFigures {
    /// True when no drain gave a utilization value.
    pub fn is_empty(&self) -> bool {
        self.util_gpu_pct.is_none() && self.util_mem_pct.is_none()
    }

    /// Writes the figures into a bucket entry (the device's point-read gauges are replaced).
    pub fn apply(&self, d: &mut DeviceBucket) {
        if self.util_gpu_pct.is_some() {
            d.util_gpu_pct = self.util_gpu_pct;
        }
        if self.util_mem_pct.is_some() {
            d.util_mem_pct = self.util_mem_pct;
        }
        d.job_util_gpu_pct = self.job_util_gpu_pct;
        d.job_util_mem_pct = self.job_util_mem_pct;
        d.util_flags = (self.flags != 0).then_some(self.flags);
        d.util_covered_ms = (self.flags & UTIL_FROM_BUFFER != 0).then_some(self.covered_ms);
    }
}

/// One device's fold: the figures of the bucket in progress, and what must survive from one
/// bucket to the next (the last timestamps seen, so no sample is counted twice).
#[derive(Debug, Clone, Default)]
pub struct IntervalFold {
    cur: IntervalFigures,
    last_gpu_ts_us: Option<u64>,
    last_mem_ts_us: Option<u64>,
    last_proc_ts_us: Option<u64>,
}

/// Utilization is a percentage: a driver answering more is clamped (the spool refuses > 100).
fn pct(v: u32) -> u64 {
    u64::from(v.min(100))
}

/// The values of `samples` newer than `*last` (advancing it), and the time they cover.
fn fresh(samples: &[(u64, u32)], last: &mut Option<u64>) -> (Vec<u64>, u64) {
    let mut vals = Vec::with_capacity(samples.len());
    let mut covered_ms = 0u64;
    for &(ts, v) in samples {
        if last.is_some_and(|l| ts <= l) {
            continue;
        }
        if let Some(l) = *last {
            covered_ms += ((ts - l) / 1000).min(MAX_SAMPLE_SPACING_MS);
        }
        *last = Some(ts);
        vals.push(pct(v));
    }
    (vals, covered_ms)
}

fn gauge_of(vals: &[u64]) -> Option<Gauge> {
    let (&first, rest) = vals.split_first()?;
    Some(rest.iter().fold(Gauge::one(first), |g, &v| Gauge {
        min: g.min.min(v),
        max: g.max.max(v),
        sum: g.sum + v,
        count: g.count + 1,
    }))
}

/// `g` scaled by `num/den` (the job's share): the sum rounded, the extremes rounded outwards, so
/// the result is still a valid gauge (min × count ≤ sum ≤ max × count).
fn scaled(g: Gauge, num: u64, den: u64) -> Gauge {
    let den = den.max(1);
    let num = num.min(den);
    Gauge {
        min: g.min * num / den,
        max: (g.max * num).div_ceil(den),
        sum: (g.sum * num + den / 2) / den,
        count: g.count,
    }
}

impl IntervalFold {
    /// Adds one drain. `job_pids` sorted.
    pub fn add(&mut self, d: &DeviceDrain, job_pids: &[u32]) {
        let (gpu, covered_gpu) = match d.source {
            UtilSource::Buffer => fresh(&d.util_gpu, &mut self.last_gpu_ts_us),
            // Point reads: each stands for itself; no timestamp order to keep.
            UtilSource::Point => (d.util_gpu.iter().map(|&(_, v)| pct(v)).collect(), 0),
        };
        let (mem, _) = match d.source {
            UtilSource::Buffer => fresh(&d.util_mem, &mut self.last_mem_ts_us),
            UtilSource::Point => (d.util_mem.iter().map(|&(_, v)| pct(v)).collect(), 0),
        };
        let g_gpu = gauge_of(&gpu);
        let g_mem = gauge_of(&mem);
        if g_gpu.is_some() || g_mem.is_some() {
            self.cur.flags |= match d.source {
                UtilSource::Buffer => UTIL_FROM_BUFFER,
                UtilSource::Point => UTIL_FROM_POINT_READS,
            };
        }
        self.cur.covered_ms += covered_gpu;
        self.cur.util_gpu_pct = Gauge::merge(self.cur.util_gpu_pct, g_gpu);
        self.cur.util_mem_pct = Gauge::merge(self.cur.util_mem_pct, g_mem);

        let Some(procs) = &d.processes else {
            return;
        };
        let (mut job_sm, mut all_sm, mut job_mem, mut all_mem) = (0u64, 0u64, 0u64, 0u64);
        let mut newest = self.last_proc_ts_us;
        for p in procs {
            if self.last_proc_ts_us.is_some_and(|l| p.timestamp_us <= l) {
                continue;
            }
            newest = Some(newest.map_or(p.timestamp_us, |n| n.max(p.timestamp_us)));
            let (sm, mm) = (pct(p.sm_pct), pct(p.mem_pct));
            all_sm += sm;
            all_mem += mm;
            if job_pids.binary_search(&p.pid).is_ok() {
                job_sm += sm;
                job_mem += mm;
            } else if sm + mm > 0 {
                self.cur.flags |= UTIL_OTHERS_ACTIVE;
            }
        }
        self.last_proc_ts_us = newest;
        let share = |dev: Option<Gauge>, job: u64, all: u64| -> Option<Gauge> {
            let g = dev?;
            if all > 0 {
                Some(scaled(g, job, all))
            } else if g.max == 0 {
                // The device was idle throughout: so was the job.
                Some(g)
            } else {
                // Busy, yet no process reported utilization: the job's share is unknown.
                None
            }
        };
        self.cur.job_util_gpu_pct =
            Gauge::merge(self.cur.job_util_gpu_pct, share(g_gpu, job_sm, all_sm));
        self.cur.job_util_mem_pct =
            Gauge::merge(self.cur.job_util_mem_pct, share(g_mem, job_mem, all_mem));
    }

    /// The figures of the bucket in progress; the next bucket starts empty (the timestamps
    /// seen are kept).
    pub fn take(&mut self) -> IntervalFigures {
        std::mem::take(&mut self.cur)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buf(ts0_ms: u64, vals: &[u32]) -> Vec<(u64, u32)> {
        vals.iter()
            .enumerate()
            .map(|(i, &v)| ((ts0_ms + 200 * i as u64) * 1000, v))
            .collect()
    }

    #[test]
    fn drains_fold_into_one_gauge_without_counting_a_sample_twice() {
        let mut f = IntervalFold::default();
        // Two drains that overlap by two samples (a driver that ignores the timestamp).
        f.add(
            &DeviceDrain {
                util_gpu: buf(0, &[0, 100, 100, 0, 0]),
                ..Default::default()
            },
            &[],
        );
        f.add(
            &DeviceDrain {
                util_gpu: buf(600, &[0, 0, 50, 50]),
                ..Default::default()
            },
            &[],
        );
        let x = f.take();
        let g = x.util_gpu_pct.unwrap();
        // 0,100,100,0,0 then (0,0 already seen) 50,50.
        assert_eq!((g.count, g.sum, g.min, g.max), (7, 300, 0, 100));
        assert_eq!(x.flags, UTIL_FROM_BUFFER);
        assert_eq!(x.covered_ms, 6 * 200, "the first sample has no predecessor");
        assert_eq!(x.job_util_gpu_pct, None, "no per-process data");
        // The next bucket starts empty but knows what was seen.
        f.add(
            &DeviceDrain {
                util_gpu: buf(1200, &[50, 10]),
                ..Default::default()
            },
            &[],
        );
        let g = f.take().util_gpu_pct.unwrap();
        assert_eq!((g.count, g.sum), (1, 10));
    }

    #[test]
    fn overflowed_buffer_covers_only_what_it_holds() {
        let mut f = IntervalFold::default();
        f.add(
            &DeviceDrain {
                util_gpu: buf(0, &[5, 5]),
                ..Default::default()
            },
            &[],
        );
        // 20 s later: the gap is not covered.
        f.add(
            &DeviceDrain {
                util_gpu: buf(20_000, &[5, 5]),
                ..Default::default()
            },
            &[],
        );
        assert_eq!(f.take().covered_ms, 200 + MAX_SAMPLE_SPACING_MS + 200);
    }

    #[test]
    fn point_reads_are_flagged_and_counted_each() {
        let mut f = IntervalFold::default();
        for v in [0, 40] {
            f.add(
                &DeviceDrain {
                    source: UtilSource::Point,
                    util_gpu: vec![(0, v)],
                    util_mem: vec![(0, 130)],
                    processes: None,
                },
                &[],
            );
        }
        let x = f.take();
        assert_eq!(x.flags, UTIL_FROM_POINT_READS);
        assert_eq!(x.util_gpu_pct.unwrap().sum, 40);
        assert_eq!(x.util_mem_pct.unwrap().max, 100, "clamped to a percentage");
        assert_eq!(x.covered_ms, 0);
    }

    #[test]
    fn job_share_from_its_own_processes() {
        let procs = |a: u32, b: u32| {
            Some(vec![
                ProcessUtil {
                    pid: 10,
                    timestamp_us: 1_000_000,
                    sm_pct: a,
                    mem_pct: a / 2,
                },
                ProcessUtil {
                    pid: 20,
                    timestamp_us: 1_000_000,
                    sm_pct: b,
                    mem_pct: b / 2,
                },
            ])
        };
        let drain = DeviceDrain {
            util_gpu: buf(0, &[80, 80, 80, 80]),
            util_mem: buf(0, &[40, 40, 40, 40]),
            processes: procs(60, 20),
            ..Default::default()
        };
        let mut a = IntervalFold::default();
        a.add(&drain, &[10]);
        let x = a.take();
        let j = x.job_util_gpu_pct.unwrap();
        // 80 % of the device × 60 / 80 of the processes' SM utilization.
        assert_eq!((j.mean(), j.count), (60.0, 4));
        assert_eq!(x.job_util_mem_pct.unwrap().mean(), 30.0);
        assert!(x.flags & UTIL_OTHERS_ACTIVE != 0);
        assert!(crate::spool::validate::gauge_ok(&j));
        let mut b = IntervalFold::default();
        b.add(&drain, &[20]);
        assert_eq!(b.take().job_util_gpu_pct.unwrap().mean(), 20.0);
        // Alone on the device: the job's figure is the device's; no other activity flagged.
        let mut c = IntervalFold::default();
        c.add(&drain, &[10, 20]);
        let x = c.take();
        assert_eq!(x.job_util_gpu_pct.unwrap().mean(), 80.0);
        assert_eq!(x.flags & UTIL_OTHERS_ACTIVE, 0);
    }

    #[test]
    fn job_share_unknown_when_busy_without_process_samples() {
        let mut f = IntervalFold::default();
        f.add(
            &DeviceDrain {
                util_gpu: buf(0, &[50]),
                processes: Some(vec![]),
                ..Default::default()
            },
            &[1],
        );
        assert_eq!(f.take().job_util_gpu_pct, None);
        f.add(
            &DeviceDrain {
                util_gpu: buf(200, &[0, 0]),
                processes: Some(vec![]),
                ..Default::default()
            },
            &[1],
        );
        let j = f.take().job_util_gpu_pct.unwrap();
        assert_eq!(
            (j.max, j.count),
            (0, 2),
            "an idle device: the job was idle too"
        );
    }
}
