#![allow(clippy::manual_is_multiple_of)] // `is_multiple_of` needs Rust 1.87; the workspace builds with 1.85
//! jobscope-core: everything the SPANK plugin and the epilog binaries share.
//!
//! Layout (one obvious place per concern):
//! - [`sample`]: the typed reading of one job cgroup at one instant ([`sample::Reading`]).
//! - [`cgroup`]: cgroup v1/v2 discovery and readers (root path is always a parameter).
//! - [`procio`]: `/proc/<pid>/io` summing, for cgroup v1 where SLURM makes no blkio job cgroup.
//! - [`spool`]: the on-disk, versioned, append-only, size-bounded spool (writer, reader, thinning).
//! - [`summary`]: the per-node and per-job summary types (what is archived) and the analysis maths.
//! - [`config`]: the site configuration file.
//! - [`fsutil`]: root-owned directory and atomic-write helpers that refuse symlink tricks.
//! - [`gpu`]: which GPUs are the job's, NVML/amdgpu sampling in its own thread, `gpu.jsc`, GPU summary.
pub mod cgroup;
pub mod config;
pub mod fsutil;
pub mod gpu;
pub mod procio;
pub mod sample;
pub mod sampler;
pub mod slurm;
pub mod spool;
pub mod summary;
