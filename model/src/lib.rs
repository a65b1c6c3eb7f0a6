#![allow(clippy::manual_is_multiple_of)] // `is_multiple_of` needs Rust 1.87; the workspace builds with 1.85
//! jobscope-model: the pure stages of the data flow, with no I/O, no libc and no NVML.
//!
//! - [`sample`]: one reading of a job cgroup ([`sample::Reading`]) and the rates derived from pairs.
//! - [`spool`]: the spool file format: frames, buckets, events, decoding from bytes, thinning.
//! - [`gpu`]: GPU identity, the `gpu.jsc` format, per-GPU summaries and advice.
//! - [`summary`]: node summary (from decoded spool files), the archived job document, analysis.
//! - [`job`]: what the scheduler says about a job ([`job::JobFacts`]), its state and end reason.
//! - [`params`]: the analysis thresholds.
//! - [`slurm`]: SLURM's notations (hostlists, cpulists, step ids) as pure parsers.
//! - [`vocab`]: enums written once with their one spelling (states, classes, event kinds, …).
//! - [`watch`]: rules over a running job's live figures, and what to do about a job that breaks one.
//! - [`text`]: the characters no view or one-line message may show, and how a message escapes them.
//!
//! Reading files, sampling and SLURM's commands live in `jobscope-sampler` and `jobscope-epilog`, which
//! depend on this crate; nothing here depends on them.
pub mod gpu;
pub mod job;
pub mod kernel_abi;
pub mod params;
pub mod sample;
pub mod slurm;
pub mod spool;
pub mod summary;
pub mod text;
pub mod time;
pub mod vocab;
pub mod watch;
