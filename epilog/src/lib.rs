#![recursion_limit = "256"]
//! jobscope epilog and CLI.
//!
//! - [`run`]: the Epilog flow and multi-node assembly (one report per job), and `reap`.
//! - [`pipeline`]: the one way a report is made: spool → node summary → job summary → analysis
//!   (assembly itself is `jobscope_core::summary::job`, pure).
//! - analysis (scalability, classification, anomalies, advice) lives in `jobscope_core::summary::analysis`.
//! - [`present`]: the one presenter: all wording and number formatting, one view model rendered by
//!   the text report, the HTML mail, the subject and the array digest (`report-templates/`).
//! - [`archive`]: the JSON archive and who may read what.
//! - [`slurm`]: the one SLURM adapter (Epilog env, `squeue`, `scontrol`; SLURM-free job facts;
//!   how a job ended).
//! - [`mail`]: the end-of-job mail (message, transports, a durable queue); [`charts`]: its PNG charts.
//! - [`notify`]: mail policy, the end-of-job mail, array digests, the report in the work dir.
//! - [`audit`]: `jobscope audit` (flat rows, queries, engines); [`index`]: the Parquet index it reads.
//! - [`pg`]: the PostgreSQL sink and SQL engine (docs/postgres.md).
//! - [`local`]: `jobscope run -- CMD`, the same report without SLURM; [`live`]: `show` and `top`
//!   on a running job.
//! - [`manifest`]: the archive's per-day hash-chained manifest (tamper evidence).
pub mod archive;
pub mod audit;
pub mod charts;
pub mod cli;
pub mod index;
pub mod live;
pub mod local;
pub mod mail;
pub mod manifest;
pub mod notify;
pub mod pg;
pub mod pipeline;
pub mod present;
pub mod run;
pub mod slurm;

/// The program and version, as named in the archived document and the mail's User-Agent.
pub const GENERATOR: &str = concat!("jobscope ", env!("CARGO_PKG_VERSION"));
