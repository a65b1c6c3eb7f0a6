//! What a decoded record must satisfy to be believed.
//!
//! A CRC only says a frame is what its writer wrote. A spool is root-only, but a bug, a crash of a
//! newer writer, or a hand-edited file can still hold frames that are intact and absurd: times that
//! run backwards, counters near `u64::MAX`, a gauge with no samples. Downstream arithmetic
//! (intervals `b - a`, sums over nodes, means) would turn those into idle periods of millions of
//! years or efficiencies of 10^15 %. So the decoders drop such records here, once, and mark the
//! file as having lost a record (`torn`), which the report states; nothing after this point has to
//! guess.

use super::{Bucket, End, Event, Gauge, Header};
use crate::sample::Reading;

/// No counter or gauge of one node comes near this (2^62: 4 EiB of memory or I/O, or 53 000
/// core-days of CPU time in nanoseconds); v1's "unlimited" memory limit is already `None` when read.
pub const MAX_VALUE: u64 = 1 << 62;
/// A record more than this after the file's start is not from the job (400 days).
pub const MAX_SPAN_MS: u64 = 400 * 86_400_000;
/// Records may precede the header's start by this much (the header's time and the first sample are
/// taken a few calls apart; a small clock step backwards right at the start).
pub const EARLY_SLACK_MS: u64 = 600_000;

/// Wall-clock times before 2000-01-01 or after 2200-01-01 are not from a job (a zeroed or corrupt
/// header); a file whose header says so is refused whole, since every record's time is judged
/// against it.
pub const MIN_WALL_MS: u64 = 946_684_800_000;
pub const MAX_WALL_MS: u64 = 7_258_118_400_000;

/// No node has more cores than this (the largest single-image machines have a few thousand).
pub const MAX_NODE_CORES: u32 = 1 << 20;

/// A header worth reading the rest of the file against: its start is a plausible wall-clock time.
pub fn header_ok(h: &Header) -> bool {
    (MIN_WALL_MS..=MAX_WALL_MS).contains(&h.start_unix_ms)
}

/// Drops header values no node can have (the allocation is then unknown, not absurd) and keeps
/// the cadence within what the sampler accepts.
pub fn sanitize_header(h: &mut Header) {
    if h.alloc_cores.is_some_and(|c| c == 0 || c > MAX_NODE_CORES) {
        h.alloc_cores = None;
    }
    if h.alloc_mem_bytes.is_some_and(|b| b == 0 || !value_ok(b)) {
        h.alloc_mem_bytes = None;
    }
    h.cadence_s = h.cadence_s.clamp(1, 3600);
}

/// Tracks a file's time line: every record must lie within the file's span and never before the
/// previous one.
#[derive(Debug, Clone, Copy)]
pub struct Timeline {
    start_ms: u64,
    last_ms: u64,
}

impl Timeline {
    pub fn new(h: &Header) -> Self {
        Timeline {
            start_ms: h.start_unix_ms,
            last_ms: h.start_unix_ms.saturating_sub(EARLY_SLACK_MS),
        }
    }

    /// Accepts (and advances to) a record covering `first..=last`, or refuses it.
    pub fn accept(&mut self, first_ms: u64, last_ms: u64) -> bool {
        let ok = first_ms <= last_ms
            && first_ms >= self.last_ms
            && last_ms <= self.start_ms.saturating_add(MAX_SPAN_MS);
        if ok {
            self.last_ms = last_ms;
        }
        ok
    }
}

pub fn value_ok(v: u64) -> bool {
    v <= MAX_VALUE
}

/// A gauge merges at least one sample, its extremes are ordered, and its sum lies between
/// `min × count` and `max × count`.
pub fn gauge_ok(g: &Gauge) -> bool {
    let n = u64::from(g.count);
    g.count >= 1
        && g.min <= g.max
        && value_ok(g.max)
        && g.min.checked_mul(n).is_some_and(|lo| g.sum >= lo)
        && g.max.checked_mul(n).is_some_and(|hi| g.sum <= hi)
}

pub fn reading_ok(r: &Reading) -> bool {
    r.fields().into_iter().flatten().all(value_ok)
}

pub fn bucket_ok(b: &Bucket) -> bool {
    b.n >= 1 && reading_ok(&b.last) && b.gauges.iter().flatten().all(gauge_ok)
}

pub fn event_ok(e: &Event) -> bool {
    e.job.as_ref().is_none_or(reading_ok) && e.step_reading.as_ref().is_none_or(reading_ok)
}

pub fn end_ok(e: &End) -> bool {
    value_ok(e.samples_taken) && value_ok(e.samples_missed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(start: u64) -> Header {
        Header {
            uid: 1,
            gid: 1,
            plugin_version: "t".into(),
            ..Header::new(1, "n", "job", start)
        }
    }

    #[test]
    fn time_never_runs_backwards_nor_far_outside_the_job() {
        let mut t = Timeline::new(&header(1_000_000_000));
        assert!(t.accept(1_000_000_000, 1_000_030_000));
        assert!(t.accept(1_000_030_000, 1_000_060_000), "touching is fine");
        assert!(!t.accept(1_000_010_000, 1_000_070_000), "backwards");
        assert!(!t.accept(1_000_090_000, 1_000_080_000), "last before first");
        assert!(
            t.accept(1_000_090_000, 1_000_090_000),
            "a refusal does not advance"
        );
        assert!(!t.accept(1_000_100_000, 1_000_000_000 + MAX_SPAN_MS + 1));
        let mut t = Timeline::new(&header(1_000_000_000));
        assert!(!t.accept(0, 10), "long before the start");
        assert!(t.accept(1_000_000_000 - EARLY_SLACK_MS, 1_000_000_000));
    }

    #[test]
    fn gauges_must_be_consistent() {
        assert!(gauge_ok(&Gauge::one(5)));
        let g = |min, max, sum, count| Gauge {
            min,
            max,
            sum,
            count,
        };
        assert!(gauge_ok(&g(1, 3, 6, 3)));
        assert!(!gauge_ok(&g(1, 3, 6, 0)), "no samples");
        assert!(!gauge_ok(&g(4, 3, 7, 2)), "min above max");
        assert!(!gauge_ok(&g(1, 3, 10, 3)), "sum above max × count");
        assert!(!gauge_ok(&g(2, 3, 5, 3)), "sum below min × count");
        assert!(!gauge_ok(&g(0, u64::MAX, 1, 2)), "absurd maximum");
    }

    #[test]
    fn readings_are_bounded() {
        let mut r = Reading {
            cpu_usage_ns: Some(3_600_000_000_000),
            ..Default::default()
        };
        assert!(reading_ok(&r));
        r.mem_current_bytes = Some(u64::MAX - 3);
        assert!(!reading_ok(&r));
    }
}
