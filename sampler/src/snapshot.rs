//! How often the live snapshot (`common/src/live.rs`: its file, written by the plugin after a
//! sample) may be rewritten: a sampling policy, so it is the sampler's.

/// How often the live snapshot may be rewritten, so that its cost stays a small, bounded share
/// of one core whatever the spool's size (`sampler.max_spool_bytes` allows 64 MiB, and the
/// snapshot re-reads the node's spool each time): after a write that took `t`, the next comes no
/// sooner than `DUTY_FACTOR × t` later (at most 1 % of a core), and never more often than the
/// sampler's cadence allows anyway. The first write is always due, so a job's owner sees it at the
/// first sample.
#[derive(Debug, Clone, Default)]
pub struct Pace {
    /// When the next write is due (ms since the Unix epoch); `None`: now.
    next_due_unix_ms: Option<u64>,
}

/// A snapshot that took `t` waits at least `DUTY_FACTOR × t` before the next one.
pub const DUTY_FACTOR: u64 = 100;

impl Pace {
    /// Whether a snapshot is due at `now_unix_ms`.
    pub fn due(&self, now_unix_ms: u64) -> bool {
        self.next_due_unix_ms.is_none_or(|d| now_unix_ms >= d)
    }

    /// Records a snapshot that started at `started_unix_ms` and took `cost_ms`.
    pub fn done(&mut self, started_unix_ms: u64, cost_ms: u64) {
        self.next_due_unix_ms =
            Some(started_unix_ms.saturating_add(cost_ms.saturating_mul(DUTY_FACTOR)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pace_keeps_the_snapshot_to_a_hundredth_of_a_core() {
        let mut p = Pace::default();
        assert!(p.due(1_000), "the first snapshot is always due");
        // A cheap snapshot (under 1 ms) is due again at the next sample.
        p.done(1_000, 0);
        assert!(p.due(1_000));
        // One that took 40 ms waits 4 s: samples 1 s apart skip three and write the fourth.
        p.done(10_000, 40);
        assert!(!p.due(11_000) && !p.due(13_999));
        assert!(p.due(14_000));
        // A pathological cost never overflows into "always due".
        p.done(u64::MAX - 5, u64::MAX);
        assert!(!p.due(u64::MAX - 6));
    }
}
