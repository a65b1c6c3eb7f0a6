#![recursion_limit = "256"]
//! jobscope's report: from a node's spool to the words a user reads.
//!
//! - [`pipeline`]: the one way a report is made: spool → node summary → job summary → analysis
//!   (assembly and analysis themselves are pure, in `jobscope_model`).
//! - [`slurm`]: the one SLURM adapter, one module per release (Epilog env, `scontrol`, `squeue`;
//!   SLURM-free job facts; how a job ended).
//! - [`present`]: the one presenter: all wording and number formatting, one view model rendered by
//!   the text report, the HTML mail, the subject and the array digest (`report-templates/`).
//! - [`admin_comment`]: the job's verdict in one line for SLURM's AdminComment.
//! - [`charts`]: the report's PNG charts; [`plots`]: the cluster report's (bars, a shaded grid).
pub mod admin_comment;
pub mod charts;
pub mod pipeline;
pub mod plots;
pub mod present;
pub mod slurm;

/// The program and version, as named in the archived document and the mail's User-Agent.
pub const GENERATOR: &str = concat!("jobscope ", env!("CARGO_PKG_VERSION"));
