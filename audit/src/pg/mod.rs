//! PostgreSQL for sites that outgrow files (docs/postgres.md): a sink that pushes every archived
//! job (its flat [`crate::JobRow`] and the full summary as `jsonb`) into a table partitioned
//! by month, and an engine that answers the audit's [`crate::Query`] in SQL.
//!
//! - [`schema`]: the tables, the monthly partitions, the roles and the row-level security.
//! - [`sink`]: `push` (idempotent upsert) and `sync` (the archive's manifests since a checkpoint kept
//!   in the database itself, committed with the rows: resumable after an outage).
//! - [`engine`]: [`engine::PgEngine`], the same reports as the Parquet index, as SQL.
//!
//! The JSON archive stays the truth: the database is derived from it and can be refilled from it.

pub mod engine;
pub mod schema;
pub mod sink;

pub use jobscope_transport::pg::{connect, read_password, Client};
pub(crate) use jobscope_transport::pg::{pg_json, pg_text};
