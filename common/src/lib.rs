//! jobscope-common: the helpers every stage shares that are neither the model nor sampling. It sits
//! beneath the stages (with `jobscope-config`), above only `jobscope-model`.
//!
//! - [`fsutil`]: root-owned directory and atomic-write helpers that refuse symlink tricks, and THE
//!   no-follow, non-blocking open of a regular file ([`fsutil::open_regular`]).
//! - [`child`]: a helper program run with a bound on its time, input and output.
//! - [`users`]: the user and group databases (`getpwuid_r`, `getgrnam_r`, `getgrgid_r`).
//! - [`digest`]: SHA-256 as lower-case hex (manifests, the batch script's hash).
//! - [`spool`]: the bounded read side of the spool on disk (the format itself is
//!   `jobscope_model::spool`; the writers are the sampler's).
//! - [`bpf_maps`]: the kernel collector's pinned maps through plain `bpf(2)` (the tagger and reader
//!   of the plugin's sampler and `jobscope run`, the collector's sweep and status, its tests).
//! - [`now_unix_ms`]: the wall clock as every stage stamps it.
pub mod bpf_maps;
pub mod child;
pub mod digest;
pub mod fsutil;
pub mod live;
pub mod spool;
pub mod users;

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (0 for a clock before it).
pub fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
