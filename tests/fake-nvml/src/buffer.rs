//! The driver's utilization sample buffer, emulated: what `nvmlDeviceGetSamples` and
//! `nvmlDeviceGetProcessUtilization` answer for a scripted busy pattern.
//!
//! Like the H100 the issue measured (docs/gpu.md): one sample every [`SAMPLE_SPACING_MS`], the
//! last [`BUFFER_LEN`] kept (14 s); sample `k` is taken at `(k + 1) × 200 ms` after the driver's
//! start and its value is the share of the 200 ms before it in which the GPU was busy (what NVML
//! calls "percent of time over the past sample period during which one or more kernels was
//! executing"). Pure: the library (`lib.rs`) gives it the time, and tests call it directly to
//! generate the sample streams a monitor would drain.

use serde_json::Value;

/// Spacing of the driver's samples on the H100, milliseconds.
pub const SAMPLE_SPACING_MS: u64 = 200;
/// Samples the H100's buffer holds.
pub const BUFFER_LEN: u64 = 71;

/// When a device (or a process) is busy.
#[derive(Debug, Clone, PartialEq)]
pub enum Pattern {
    /// Busy for the first `busy_share` of every `period_ms`, periods starting at `phase_ms`.
    Periodic {
        period_ms: u64,
        busy_share: f64,
        phase_ms: u64,
    },
    /// `values[i]` percent busy during `[i × step_ms, (i + 1) × step_ms)`; the last value holds.
    Series { step_ms: u64, values: Vec<u32> },
}

impl Pattern {
    /// `{"period_ms": 7000, "busy_share": 0.3, "phase_ms": 0}` or
    /// `{"step_ms": 1000, "values": [0, 100, 50]}`.
    pub fn from_json(v: &Value) -> Option<Pattern> {
        if let Some(period_ms) = v.get("period_ms").and_then(Value::as_u64) {
            return Some(Pattern::Periodic {
                period_ms: period_ms.max(1),
                busy_share: v.get("busy_share")?.as_f64()?.clamp(0.0, 1.0),
                phase_ms: v.get("phase_ms").and_then(Value::as_u64).unwrap_or(0),
            });
        }
        Some(Pattern::Series {
            step_ms: v.get("step_ms")?.as_u64()?.max(1),
            values: v
                .get("values")?
                .as_array()?
                .iter()
                .map(|x| x.as_u64().map(|n| n.min(100) as u32))
                .collect::<Option<Vec<_>>>()?,
        })
    }

    /// Busy milliseconds in `[0, t_ms)`.
    fn busy_before(&self, t_ms: f64) -> f64 {
        match self {
            Pattern::Periodic {
                period_ms,
                busy_share,
                phase_ms,
            } => {
                let p = *period_ms as f64;
                let b = busy_share * p;
                let u = t_ms - *phase_ms as f64;
                let k = (u / p).floor();
                let r = u - k * p;
                k * b + r.min(b)
            }
            Pattern::Series { step_ms, values } => {
                let s = *step_ms as f64;
                let mut busy = 0.0;
                let mut t = 0.0;
                let mut i = 0usize;
                while t < t_ms {
                    let v = values.get(i).or(values.last()).copied().unwrap_or(0) as f64;
                    let end = (t + s).min(t_ms);
                    busy += (end - t) * v / 100.0;
                    if i >= values.len() {
                        // The last value holds: the rest in one step.
                        busy += (t_ms - end) * v / 100.0;
                        break;
                    }
                    t = end;
                    i += 1;
                }
                busy
            }
        }
    }

    /// Busy milliseconds in `[a_ms, b_ms)`.
    pub fn busy_ms(&self, a_ms: u64, b_ms: u64) -> f64 {
        self.busy_before(b_ms as f64) - self.busy_before(a_ms as f64)
    }

    /// The true mean utilization over `[a_ms, b_ms)`, percent.
    pub fn mean_pct(&self, a_ms: u64, b_ms: u64) -> f64 {
        100.0 * self.busy_ms(a_ms, b_ms) / (b_ms.saturating_sub(a_ms)).max(1) as f64
    }

    /// The driver's sample taken at `t_ms`: percent of the 200 ms before it that was busy.
    pub fn sample_at(&self, t_ms: u64) -> u32 {
        let a = t_ms.saturating_sub(SAMPLE_SPACING_MS);
        (100.0 * self.busy_ms(a, t_ms) / SAMPLE_SPACING_MS as f64).round() as u32
    }

    /// What a point read (`nvmlDeviceGetUtilizationRates`) answers at `t_ms`: the last sample.
    pub fn point_read(&self, t_ms: u64) -> u32 {
        let k = t_ms / SAMPLE_SPACING_MS;
        if k == 0 {
            0
        } else {
            self.sample_at(k * SAMPLE_SPACING_MS)
        }
    }
}

/// Times (ms since the driver's start) of the samples in the buffer at `now_ms`, oldest first.
pub fn buffered_times(now_ms: u64) -> impl Iterator<Item = u64> {
    let newest = now_ms / SAMPLE_SPACING_MS; // samples 1..=newest exist
    let oldest = newest.saturating_sub(BUFFER_LEN - 1).max(1);
    (oldest..=newest).map(|k| k * SAMPLE_SPACING_MS)
}

/// The driver's timestamp (µs) of the sample at `t_ms`, for a driver started at `base_us`.
pub fn timestamp_us(base_us: u64, t_ms: u64) -> u64 {
    base_us + t_ms * 1000
}

/// `nvmlDeviceGetSamples(GPU_UTILIZATION_SAMPLES)` at `now_ms`: the buffered samples newer than
/// `last_seen_us` (0: all), `(timestamp µs, percent)`, oldest first.
pub fn samples_since(p: &Pattern, base_us: u64, now_ms: u64, last_seen_us: u64) -> Vec<(u64, u32)> {
    buffered_times(now_ms)
        .map(|t| (timestamp_us(base_us, t), p.sample_at(t)))
        .filter(|(ts, _)| *ts > last_seen_us)
        .collect()
}

/// `nvmlDeviceGetProcessUtilization` at `now_ms`: one entry per buffered sample newer than
/// `last_seen_us` and per process with non-zero utilization in it, `(pid, timestamp µs, SM %)`.
pub fn process_samples_since(
    procs: &[(u32, Pattern)],
    base_us: u64,
    now_ms: u64,
    last_seen_us: u64,
) -> Vec<(u32, u64, u32)> {
    let mut out = Vec::new();
    for t in buffered_times(now_ms) {
        let ts = timestamp_us(base_us, t);
        if ts <= last_seen_us {
            continue;
        }
        for (pid, p) in procs {
            let v = p.sample_at(t);
            if v > 0 {
                out.push((*pid, ts, v));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn periodic_pattern_samples_and_truth() {
        let p = Pattern::from_json(&json!({"period_ms": 1000, "busy_share": 0.1})).unwrap();
        // Busy [0, 100) of every second: the sample at 200 ms sees 100 of its 200 ms.
        assert_eq!(p.sample_at(200), 50);
        assert_eq!(p.sample_at(400), 0);
        assert_eq!(p.sample_at(1200), 50);
        assert!((p.mean_pct(0, 10_000) - 10.0).abs() < 1e-9);
        let phased = Pattern::Periodic {
            period_ms: 30_000,
            busy_share: 0.2,
            phase_ms: 12_000,
        };
        assert_eq!(phased.point_read(10_000), 0);
        assert_eq!(phased.point_read(14_000), 100);
        assert!((phased.busy_ms(0, 60_000) - 12_000.0).abs() < 1e-9);
    }

    #[test]
    fn series_pattern() {
        let p = Pattern::from_json(&json!({"step_ms": 1000, "values": [0, 100, 50]})).unwrap();
        assert_eq!(p.sample_at(1000), 0);
        assert_eq!(p.sample_at(1200), 100);
        assert_eq!(p.sample_at(5000), 50, "the last value holds");
        assert!((p.busy_ms(0, 4000) - 2000.0).abs() < 1e-9);
    }

    #[test]
    fn the_buffer_holds_71_samples_200_ms_apart() {
        let p = Pattern::Periodic {
            period_ms: 1000,
            busy_share: 1.0,
            phase_ms: 0,
        };
        assert!(samples_since(&p, 0, 150, 0).is_empty());
        let s = samples_since(&p, 1_000_000, 60_000, 0);
        assert_eq!(s.len(), 71);
        assert_eq!(s.last().unwrap().0, 1_000_000 + 60_000_000);
        assert_eq!(s[1].0 - s[0].0, 200_000);
        let newer = samples_since(&p, 1_000_000, 61_000, s.last().unwrap().0);
        assert_eq!(newer.len(), 5);
        let procs = process_samples_since(
            &[
                (7, p.clone()),
                (
                    8,
                    Pattern::Series {
                        step_ms: 1,
                        values: vec![0],
                    },
                ),
            ],
            0,
            1000,
            0,
        );
        assert_eq!(procs.len(), 5, "pid 8 never busy: no entries");
    }
}
