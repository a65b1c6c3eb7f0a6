//! Sending a node's envelopes: one short connection, one idempotent insert per envelope, the
//! envelope removed from the outbox only once the database has it. Bounded by a time budget:
//! the Epilog gives `transport.send_budget_s`, and whatever is not sent by then stays in the
//! outbox for `jobscope reap`.
//!
//! When a whole cluster's jobs end together the database may refuse connections (`too many
//! clients`, or a connection limit on the node role): each sender then waits a random, growing
//! while before it tries again, so the nodes spread out instead of retrying in step.

use crate::outbox::{Outbox, Pending};
use crate::pg::{connect_within, pg_json};
use crate::Envelope;
use anyhow::{Context, Result};
use jobscope_config::Transport;
use postgres::Client;
use serde::Serialize;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Inserts one envelope; `Ok(false)` when the database had it already (a second send).
pub fn insert(c: &mut Client, e: &Envelope) -> Result<bool> {
    insert_in(c, e)
}

/// [`insert`] on any connection or transaction.
pub fn insert_in(c: &mut impl postgres::GenericClient, e: &Envelope) -> Result<bool> {
    let mut doc = serde_json::to_value(e)?;
    // PostgreSQL refuses U+0000 in jsonb; names and options may carry one.
    pg_json(&mut doc);
    let (cluster, job_id, node, end_ms) = e.key();
    let n = c
        .execute(
            "INSERT INTO jobscope.node_summaries
                 (cluster, job_id, node, node_start_ms, node_end_ms, envelope)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT DO NOTHING",
            &[
                &crate::pg::pg_text(&cluster).into_owned(),
                &i64::from(job_id),
                &crate::pg::pg_text(&node).into_owned(),
                &(e.summary.start_unix_ms.min(i64::MAX as u64) as i64),
                &(end_ms.min(i64::MAX as u64) as i64),
                &doc,
            ],
        )
        .with_context(|| format!("job {job_id} node {node}: inserting its summary"))?;
    Ok(n == 1)
}

/// What one [`deliver`] did.
#[derive(Debug, Default, Clone, PartialEq, Serialize)]
pub struct Delivery {
    /// Envelopes the database now holds (inserted, or there already).
    pub sent: usize,
    /// Of those, the ones it had already.
    pub already: usize,
    /// Envelopes left in the outbox.
    pub left: usize,
    /// Connections tried.
    pub attempts: u32,
    /// Why the last try failed, when something was left.
    pub last_error: Option<String>,
    /// Files in the outbox that are not envelopes (left there).
    pub unreadable: Vec<String>,
}

/// The wait before connection attempt `attempt` (1 = the second): random in the upper half of
/// 100 ms × 2^attempt, at most 2 s.
pub fn backoff(attempt: u32) -> Duration {
    let cap_ms = (100u64 << attempt.min(5)).min(2000);
    Duration::from_millis(cap_ms / 2 + fastrand::u64(0..=cap_ms / 2))
}

/// Sends the outbox's envelopes (only `only` when given: the Epilog sends its own) within
/// `budget`, retrying the connection with [`backoff`] until the budget is spent.
pub fn deliver(
    cfg: &Transport,
    outbox: &Outbox,
    only: Option<&PathBuf>,
    budget: Duration,
) -> Delivery {
    let t0 = Instant::now();
    let mut d = Delivery::default();
    let mut todo: Vec<Pending> = outbox
        .pending(crate::outbox::MAX_PER_PASS)
        .into_iter()
        .filter(|p| only.is_none_or(|o| &p.path == o))
        .filter(|p| match &p.envelope {
            Ok(_) => true,
            Err(e) => {
                d.unreadable.push(e.clone());
                false
            }
        })
        .collect();
    while !todo.is_empty() {
        let left = budget.saturating_sub(t0.elapsed());
        if left.is_zero() {
            break;
        }
        if d.attempts > 0 {
            std::thread::sleep(backoff(d.attempts).min(left));
            if budget.saturating_sub(t0.elapsed()).is_zero() {
                break;
            }
        }
        d.attempts += 1;
        let left = budget
            .saturating_sub(t0.elapsed())
            .max(Duration::from_millis(1));
        let mut c = match connect_within(&cfg.postgres, left, Some(left)) {
            Ok(c) => c,
            Err(e) => {
                d.last_error = Some(format!("{e:#}"));
                continue;
            }
        };
        // Oldest first; one failed insert ends this connection (the server may be going away).
        while let Some(p) = todo.first() {
            let Ok(env) = &p.envelope else { break };
            match insert(&mut c, env) {
                Ok(new) => {
                    if let Err(e) = outbox.remove(&p.path) {
                        d.last_error = Some(format!("{e:#}"));
                    }
                    d.sent += 1;
                    d.already += usize::from(!new);
                    todo.remove(0);
                }
                Err(e) => {
                    d.last_error = Some(format!("{e:#}"));
                    break;
                }
            }
            if budget.saturating_sub(t0.elapsed()).is_zero() {
                break;
            }
        }
    }
    d.left = todo.len();
    if d.left == 0 {
        d.last_error = None;
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_stays_random_within_its_half_and_is_capped() {
        for attempt in 1..12 {
            let cap = (100u64 << attempt.min(5)).min(2000);
            let seen: std::collections::BTreeSet<u128> =
                (0..200).map(|_| backoff(attempt).as_millis()).collect();
            assert!(seen
                .iter()
                .all(|&ms| ms >= u128::from(cap / 2) && ms <= u128::from(cap)));
            // Random: two hundred draws from a range of 50 ms or more are not all equal.
            assert!(seen.len() > 5, "attempt {attempt}: {seen:?}");
        }
        assert!(backoff(30) <= Duration::from_secs(2));
    }

    #[test]
    fn an_unreachable_database_keeps_the_envelope_and_spends_at_most_the_budget() {
        let tmp = tempfile::tempdir().unwrap();
        let mut cfg = Transport::default();
        // A port nothing listens on (connection refused at once).
        cfg.postgres.conninfo = Some("host=127.0.0.1 port=9 user=x dbname=x".into());
        let ob = Outbox::new(&tmp.path().join("outbox"));
        let e = crate::tests::envelope(7, "n1");
        let path = ob.put(&e).unwrap();
        let t0 = Instant::now();
        let d = deliver(&cfg, &ob, Some(&path), Duration::from_millis(700));
        let took = t0.elapsed();
        assert_eq!((d.sent, d.left), (0, 1), "{d:?}");
        assert!(d.attempts >= 2, "retried within the budget: {d:?}");
        assert!(
            d.last_error.as_deref().unwrap_or("").contains("127.0.0.1"),
            "{d:?}"
        );
        assert!(took < Duration::from_secs(10), "{took:?}");
        assert!(path.exists());
    }
}
