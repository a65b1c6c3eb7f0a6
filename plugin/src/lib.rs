//! jobscope SPANK plugin: glue between slurmstepd and `jobscope_sampler`.
//!
//! What runs where (SLURM 22.05, observed; see docs/architecture.md):
//! - `job_prolog` (root, before any job cgroup exists): writes the hand-over file with the user's
//!   `--jobscope-*` options and the job's GPU variables, which the extern step cannot see.
//! - extern step (`PrologFlags=Contain`): starts THE sampler thread for this job on this node in
//!   `task_post_fork` (after slurmstepd forked its only task, so no fork can happen while our thread
//!   holds a lock), stops it in `exit` (the job cgroup is already gone by then).
//! - batch and srun steps: write a step file with the job and step cgroups read at the first
//!   `task_post_fork` and at `exit`, which still sees the job cgroup: those are the job's final counters.
//!   Without an extern step (Contain off) the batch step also runs the sampler.
//!
//! Never harm a job: every callback returns success (the plugin is `optional`, and an error from
//! `job_prolog` would drain the node), every callback body is inside `catch_unwind`, a panic hook keeps
//! panics off the job's stderr, nothing here calls `exit` or `abort`, and errors go to SLURM's log.

mod admin_comment;
mod args;
mod glue;
mod handover;
mod resident;
mod scope;
mod script;
#[cfg(test)]
mod slurm_version;
mod steps;

pub use args::Args;
/// The SLURM release this build targets (from the headers, plugin/build.rs).
pub use glue::BUILT_FOR_SLURM;

/// Logs through SLURM's log (slurmd's log file for slurmstepd), prefixed "jobscope: error: ".
///
/// At SLURM's `info` level on purpose: in batch and srun steps slurmstepd copies `error()` messages to
/// the JOB's stderr ("slurmstepd: error: …"), and jobscope must never write into a user's output.
pub(crate) fn log_error(msg: &str) {
    slurm_spank::spank_log(
        slurm_spank::LogLevel::Info,
        &format!("jobscope: error: {msg}"),
    );
}

pub(crate) fn log_info(msg: &str) {
    slurm_spank::spank_log(slurm_spank::LogLevel::Verbose, &format!("jobscope: {msg}"));
}

/// Logs what a site turned on and wants to see done (slurmd's default level shows `info`), never
/// into the job's output (see [`log_error`]).
pub(crate) fn log_notice(msg: &str) {
    slurm_spank::spank_log(slurm_spank::LogLevel::Info, &format!("jobscope: {msg}"));
}
