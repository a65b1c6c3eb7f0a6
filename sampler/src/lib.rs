#![allow(clippy::manual_is_multiple_of)] // `is_multiple_of` needs Rust 1.87; the workspace builds with 1.85
//! jobscope-sampler: the I/O side shared by the SPANK plugin and the epilog binaries.
//!
//! - [`cgroup`]: cgroup v1/v2 discovery and readers (root path is always a parameter).
//! - [`procio`]: `/proc/<pid>/io` summing, for cgroup v1 where SLURM makes no blkio job cgroup.
//! - [`sampler`]: the job's sampling thread (schedule, gauges, bounded stop).
//! - [`scope`]: where the job's cgroup is and what it was allocated, as the caller supplies it.
//! - [`spool`]: the bounded spool writers and file reader (the format itself is `jobscope_model::spool`).
//! - [`gpu`]: which GPUs are the job's, NVML/amdgpu sampling in its own thread, the `gpu.jsc` writer.
//! - [`config`]: the site configuration file.
//! - [`digest`]: SHA-256 as lower-case hex (manifests, the batch script's hash).
//! - [`fsutil`]: root-owned directory and atomic-write helpers that refuse symlink tricks, and THE
//!   no-follow, non-blocking open of a regular file ([`fsutil::open_regular`]).
//! - [`child`]: a helper program run with a bound on its time, input and output.
//! - [`users`]: the user database (`getpwuid_r`).
//!
//! The pure stages (spool format, summaries, analysis) are in `jobscope-model`, re-exported below.
pub mod cgroup;
pub mod child;
pub mod config;
pub mod digest;
pub mod fsutil;
pub mod gpu;
pub mod kernel;
pub mod procio;
pub mod proctree;
pub mod sampler;
pub mod scope;
pub mod snapshot;
pub mod spool;
pub mod users;

// The pure stages live in jobscope-model; these names keep one path for the plugin and the epilog.
pub use jobscope_model::{job, params, sample, slurm, summary, text, time, vocab};
