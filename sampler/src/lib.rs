#![allow(clippy::manual_is_multiple_of)] // `is_multiple_of` needs Rust 1.87; the workspace builds with 1.85
//! jobscope-sampler: sampling, shared by the SPANK plugin and `jobscope run`.
//!
//! - [`cgroup`]: cgroup v1/v2 discovery and readers (root path is always a parameter).
//! - [`procio`]: `/proc/<pid>/io` summing, for cgroup v1 where SLURM makes no blkio job cgroup.
//! - [`proctree`]: a job's processes found through /proc when there is no cgroup (`jobscope run`).
//! - [`sampler`]: the job's sampling thread (schedule, gauges, bounded stop).
//! - [`scope`]: where the job's cgroup is and what it was allocated, as the caller supplies it.
//! - [`spool`]: the bounded spool writers (the format is `jobscope_model::spool`, the reader
//!   `jobscope_common::spool`).
//! - [`gpu`]: which GPUs are the job's, NVML/amdgpu sampling in its own thread, the `gpu.jsc` writer.
//! - [`kernel_view`]: the job's view of the kernel collector's pinned maps (the map operations
//!   are `jobscope_common::bpf_maps`).
//! - [`snapshot`]: how often the live snapshot (`jobscope_common::live`) is rewritten.
//!
//! The pure stages (spool format, summaries, analysis) are in `jobscope-model`; the site
//! configuration is `jobscope-config`; file-system, child-process and user-database helpers are
//! `jobscope-common`. This crate re-exports none of them.
pub mod cgroup;
pub mod gpu;
pub mod kernel_view;
pub mod procio;
pub mod proctree;
pub mod sampler;
pub mod scope;
pub mod snapshot;
pub mod spool;
