//! jobscope epilog and CLI.
//!
//! - [`run`]: the Epilog flow and multi-node assembly (one report per job).
//! - [`assemble`]: node summaries → job summary (aggregation rules, end state).
//! - [`analyze`]: scalability, classification, anomalies, `#SBATCH` advice.
//! - [`render`]: the text report (handlebars, `report-templates/`).
//! - [`archive`]: the JSON archive and who may read what.
//! - [`jobinfo`]: what SLURM says about the job (Epilog env, `squeue --json`).
pub mod analyze;
pub mod archive;
pub mod assemble;
pub mod cli;
pub mod jobinfo;
pub mod render;
pub mod run;
