//! jobscope's archive: what is kept of every job run, and who may read it.
//!
//! - the store (this crate's root, `store.rs`): one schema-versioned JSON document per run, a copy
//!   its owner can read but not alter, the one tree walker, [`load`];
//! - [`manifest`]: the per-day hash-chained manifest (tamper evidence);
//! - [`history`] and [`peer`]: the small files the index update writes beside the index (a user's
//!   earlier runs, the peer cohorts) and what the Epilog reads of them.
mod store;
pub use store::*;

pub mod history;
pub mod manifest;
pub mod peer;
