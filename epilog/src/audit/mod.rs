//! `jobscope audit`: questions over the whole archive (docs/audit.md).
//!
//! - [`row`]: the flat row per job (and per node), built from a `JobSummary` by a pure function;
//! - [`query`]: what is asked (window, filters, group keys, report) and the [`query::Engine`] trait;
//! - [`table`]: the engine-independent answer.
//!
//! The Parquet index that holds the rows is `crate::index`; the JSON archive stays the truth.
pub mod arrow;
pub mod eval;
pub mod query;
pub mod row;
pub mod table;

pub use query::{Engine, Filters, GroupKey, Query, Report, WasteMetric, Window};
pub use row::{JobRow, NodeRow, COLUMNS, NODE_COLUMNS};
pub use table::{ColType, Column, Table, Value};
