//! `jobscope audit`: questions over the whole archive (docs/audit.md). The engine only; the admin
//! products made of it (the cluster report, the alerts) are jobscope-admin.
//!
//! - [`row`]: the flat row per job (and per node), built from a `JobSummary` by a pure function;
//! - [`query`]: what is asked (window, filters, group keys, report) and the [`query::Engine`] trait;
//! - [`table`]: the engine-independent answer; [`render`]: for people and for scripts;
//! - [`eval`]: the one evaluation over Arrow batches, shared by the Parquet engine and
//!   [`eval::MemEngine`] (in memory), so neither is a check on the other: tests hold both to
//!   expectations computed independently (audit/src/index/tests.rs);
//! - [`index`]: the Parquet index that holds the rows (the JSON archive stays the truth), and what
//!   follows each update ([`index::feed`]: peer distributions, [`history`] (a user's earlier runs),
//!   the files the Epilog reads through `jobscope_archive::{peer, history}`; [`metrics`]:
//!   OpenMetrics);
//! - [`pg`]: the PostgreSQL sink and SQL engine (docs/postgres.md).
pub mod arrow;
pub mod eval;
pub mod history;
pub mod index;
pub mod metrics;
pub mod pg;
pub mod query;
pub mod render;
pub mod rollup;
pub mod row;
pub mod table;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use index::feed::{after_update, write_cohorts, write_metrics};
pub use query::{Engine, Filters, GroupKey, Query, Report, WasteMetric, Window, Zone};
pub use row::{JobRow, NodeRow, COLUMNS, NODE_COLUMNS};
pub use table::{ColType, Column, Table, Value};

/// Who owns what the indexer writes: root and the admin group when run as root, else the caller.
pub(crate) fn owner(admin_gid: u32) -> Option<(u32, u32)> {
    // SAFETY: geteuid cannot fail.
    (unsafe { libc::geteuid() } == 0).then_some((0, admin_gid))
}
