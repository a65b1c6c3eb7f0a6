//! The spool: what the plugin writes on each node for each job, and what the epilog reads.
//!
//! # Layout
//! `<spool_dir>/<jobid>.<node>/` (directory 0700, root) holds
//! - `job.jsc`: the job cgroup's time series, written by the one sampler thread of the job on this node;
//! - `step_<name>.jsc`: one small file per step (`batch`, `0`, `1`…) written by that step's slurmstepd:
//!   the job and step cgroups read at step start and at step exit. The job cgroup is deleted before the
//!   extern step's exit and before any epilog runs, so these exit readings are the job's final counters.
//!
//! # File format (version [`FORMAT_VERSION`])
//! ```text
//! file   := MAGIC(4 = "JSCP") version(u16 LE) frame(header) frame*
//! frame  := kind(u8) len(u32 LE) payload(len bytes) crc32(u32 LE, over kind+len+payload)
//! kinds  := 0 header (JSON) | 1 bucket (binary, see codec) | 2 event (JSON) | 3 end (JSON)
//! ```
//! Frames are only ever appended, each with one `write(2)`; a crash mid-write leaves a torn last frame
//! that the reader detects (short length or bad CRC) and drops: the file is never unreadable.
//! The sampler rewrites the file (temp file, fsync, rename) only to thin it, see [`thin`].

pub mod codec;
pub mod thin;
pub mod validate;

use crate::sample::Reading;
use crate::sample::{CgroupVersion, IoSource};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub const MAGIC: &[u8; 4] = b"JSCP";
pub const FORMAT_VERSION: u16 = 1;
/// Hard cap on the bytes of one node-job spool (all files), from the design: ≤ 1 MiB however long the job.
pub const DEFAULT_MAX_SPOOL_BYTES: u64 = 1024 * 1024;
/// Bytes reserved for step files inside [`DEFAULT_MAX_SPOOL_BYTES`].
pub const STEP_FILES_BUDGET_BYTES: u64 = 192 * 1024;
/// Bytes reserved for `gpu.jsc` inside [`DEFAULT_MAX_SPOOL_BYTES`] (see `crate::gpu::spool`).
pub const GPU_FILE_BUDGET_BYTES: u64 = 128 * 1024;

pub const KIND_HEADER: u8 = 0;
pub const KIND_BUCKET: u8 = 1;
pub const KIND_EVENT: u8 = 2;
pub const KIND_END: u8 = 3;

/// The first frame of every spool file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    pub format_version: u16,
    pub job_id: u32,
    pub node: String,
    /// "job" for `job.jsc`, otherwise the step name (`batch`, `0`, …).
    pub series: String,
    pub uid: u32,
    pub gid: u32,
    pub cgroup_version: Option<CgroupVersion>,
    /// The job cgroup directory sampled (memory controller on v1).
    pub cgroup_path: Option<String>,
    /// Where the sampler takes the job's I/O from. Absent in spools of writers before it was
    /// recorded: then v2 meant `io.stat` and v1 `/proc`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_source: Option<IoSource>,
    /// `/proc/sys/kernel/random/boot_id`, so a reader can tell a reboot happened.
    pub boot_id: Option<String>,
    /// Boot time, seconds since the epoch (`btime` of /proc/stat).
    pub boot_time_s: Option<u64>,
    pub start_unix_ms: u64,
    pub cadence_s: u32,
    pub plugin_version: String,
    /// Cores allocated to the job on this node (SPANK `job_alloc_cores` expanded), if known.
    pub alloc_cores: Option<u32>,
    /// Memory allocated to the job on this node (SPANK `job_alloc_mem`), if known.
    pub alloc_mem_bytes: Option<u64>,
    /// User options and GPU variables handed over from job_prolog (extern step only sees them this way).
    #[serde(default)]
    pub handover: Option<Handover>,
}

impl Header {
    /// A header of this format version for `series` of `job_id` on `node`, started at
    /// `start_unix_ms`, with the default cadence (30 s) and nothing else known: callers set what
    /// they know with struct update syntax.
    pub fn new(job_id: u32, node: &str, series: &str, start_unix_ms: u64) -> Header {
        Header {
            format_version: FORMAT_VERSION,
            job_id,
            node: node.into(),
            series: series.into(),
            uid: 0,
            gid: 0,
            cgroup_version: None,
            cgroup_path: None,
            io_source: None,
            boot_id: None,
            boot_time_s: None,
            start_unix_ms,
            cadence_s: 30,
            plugin_version: String::new(),
            alloc_cores: None,
            alloc_mem_bytes: None,
            handover: None,
        }
    }
}

/// What `job_prolog` sees and the extern step does not: user SPANK options and GPU variables.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Handover {
    pub job_id: u32,
    #[serde(default)]
    pub options: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    pub gpus: Option<String>,
    #[serde(default)]
    pub cuda_visible_devices: Option<String>,
    #[serde(default)]
    pub gpu_device_ordinal: Option<String>,
    #[serde(default)]
    pub rocr_visible_devices: Option<String>,
}

/// Summary statistics of one gauge over the samples merged into a bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Gauge {
    pub min: u64,
    pub max: u64,
    pub sum: u64,
    pub count: u32,
}

impl Gauge {
    pub fn one(v: u64) -> Self {
        Gauge {
            min: v,
            max: v,
            sum: v,
            count: 1,
        }
    }
    pub fn merge(a: Option<Gauge>, b: Option<Gauge>) -> Option<Gauge> {
        match (a, b) {
            (Some(a), Some(b)) => Some(Gauge {
                min: a.min.min(b.min),
                max: a.max.max(b.max),
                sum: a.sum.saturating_add(b.sum),
                count: a.count.saturating_add(b.count),
            }),
            (a, None) => a,
            (None, b) => b,
        }
    }
    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum as f64 / self.count as f64
        }
    }
}

/// Number of tracked gauges; their order is part of the format.
pub const N_GAUGES: usize = 5;
/// Gauges whose min/max/mean survive thinning, so a short peak is never lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum GaugeId {
    /// `mem_current_bytes`.
    MemCurrentBytes = 0,
    /// Busy cores × 1000 over each sampling interval (from `cpu_usage_ns` pairs).
    BusyMilliCores = 1,
    /// `cpus_active`.
    CpusActive = 2,
    /// `tasks` (processes).
    Tasks = 3,
    /// I/O bytes (read + write) per second over each sampling interval.
    IoBytesPerSec = 4,
}

/// One point of the series: one raw sample (`n == 1`) or several merged by thinning.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Bucket {
    pub t_first_ms: u64,
    pub t_last_ms: u64,
    /// Samples merged into this bucket.
    pub n: u32,
    /// The reading at `t_last_ms` (counters are cumulative, so the last one loses nothing).
    pub last: Reading,
    pub gauges: [Option<Gauge>; N_GAUGES],
}

impl Bucket {
    pub fn gauge(&self, g: GaugeId) -> Option<Gauge> {
        self.gauges[g as usize]
    }
    /// Merges `b` (which follows `self` in time) into `self`.
    pub fn absorb(&mut self, b: &Bucket) {
        self.t_last_ms = b.t_last_ms.max(self.t_last_ms);
        self.n = self.n.saturating_add(b.n);
        // Counters: the later reading wins, but keep a value the later one lacks.
        let mine = self.last.fields();
        let theirs = b.last.fields();
        let merged: Vec<Option<u64>> = mine
            .iter()
            .zip(theirs.iter())
            .map(|(a, b)| b.or(*a))
            .collect();
        self.last = Reading::from_fields(&merged);
        for i in 0..N_GAUGES {
            self.gauges[i] = Gauge::merge(self.gauges[i], b.gauges[i]);
        }
    }
}

/// A step's start/exit reading, or another notable event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub t_ms: u64,
    pub kind: EventKind,
    #[serde(default)]
    pub step: Option<String>,
    /// The job cgroup at that instant.
    #[serde(default)]
    pub job: Option<Reading>,
    /// The step's own cgroup at that instant.
    #[serde(default)]
    pub step_reading: Option<Reading>,
    /// The step's exit status (`step_exit`); the XID code (`gpu_xid`).
    #[serde(default)]
    pub exit_status: Option<i32>,
    #[serde(default)]
    pub message: Option<String>,
}

crate::open_vocabulary! {
    /// What an [`Event`] records, in the step files and in `gpu.jsc`. Written as its name; a name
    /// this build does not know (an older or newer writer) reads as [`EventKind::Other`] and is
    /// written back unchanged.
    #[derive(Debug, Clone, PartialEq, Eq, Hash)]
    pub enum EventKind {
        /// A step's first reading, at its start (plugin, step file).
        StepStart = "step_start",
        /// A step's reading when its last local task exited: its own cgroup still exists then.
        StepTasksDone = "step_tasks_done",
        /// A step's last reading, at its exit; `exit_status` is the step's.
        StepExit = "step_exit",
        /// The batch script's SHA-256 (lower-case hex, in `message`); at most one, written by the
        /// batch step at its exit when the hash was ready by then.
        BatchScript = "batch_script",
        /// The sampler could not read something; `message` says what (a note in the report).
        SamplerError = "sampler_error",
        /// NVML says a GPU is lost: it fell off the bus or is otherwise inaccessible.
        GpuLost = "gpu_lost",
        /// An NVML call overran its time budget.
        NvmlTimeout = "nvml_timeout",
        /// GPU sampling by NVML stopped for the rest of the job; `message` says why.
        NvmlGaveUp = "nvml_gave_up",
        /// An NVML call failed (once per device and call).
        NvmlError = "nvml_error",
        /// NVML reported an XID error on a GPU (the driver's error report: 79 fell off the bus,
        /// 48 double-bit ECC, …); its code is in `exit_status` (999: NVML did not know it).
        /// The first few per device and job only: the bucket's `xid_errors` counts them all.
        GpuXid = "gpu_xid",
        /// An amdgpu sysfs file could not be read (once per file).
        SysfsError = "sysfs_error",
        /// What the kernel view (the collector `jobscope-kernel`) could not give; `message` says
        /// what (a note in the report). Once per kind per job and node.
        KernelView = "kernel_view";
        /// A kind this build does not know, kept as it was read.
        Other(String),
    }
}

/// Written when a series ends normally. Its absence means the writer died (crash, reboot, kill).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct End {
    pub t_ms: u64,
    pub reason: String,
    /// Samples taken in total (before thinning).
    pub samples_taken: u64,
    /// Samples not taken because a read overran its time budget or failed.
    #[serde(default)]
    pub samples_missed: u64,
}

/// One spool file, decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct SpoolFile {
    pub header: Header,
    pub buckets: Vec<Bucket>,
    pub events: Vec<Event>,
    pub end: Option<End>,
    /// A torn or corrupt frame was found and everything from it on was dropped.
    pub torn: bool,
    /// Bytes of the valid prefix.
    pub valid_bytes: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not a jobscope spool file (bad magic)")]
    BadMagic { path: PathBuf },
    #[error(
        "{path}: spool format version {found} is not supported (this build reads {FORMAT_VERSION})"
    )]
    Version { path: PathBuf, found: u16 },
    #[error("{path}: header frame is missing or corrupt")]
    BadHeader { path: PathBuf },
    #[error("{path}: {what}")]
    Unsafe { path: PathBuf, what: String },
}

/// Directory of one job on one node.
pub fn job_dir(spool_dir: &Path, job_id: u32, node: &str) -> PathBuf {
    spool_dir.join(format!("{job_id}.{node}"))
}

/// Name of a step's file; the step name comes from SLURM (`batch`, `extern`, a number) and is checked.
pub fn step_file_name(step: &str) -> Option<String> {
    if !step.is_empty()
        && step.len() <= 32
        && step.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_')
    {
        Some(format!("step_{step}.jsc"))
    } else {
        None
    }
}

/// The steps a node's spool has no file for: past [`STEP_FILES_BUDGET_BYTES`] the plugin appends each
/// further step's name here, one per line (a few bytes a step), so the report can say how many steps
/// its step table lacks. Bounded by [`STEPS_NOT_RECORDED_MAX_BYTES`]; a line [`MORE_NOT_LISTED`] says
/// that more steps came after the list was full.
pub const STEPS_NOT_RECORDED_FILE: &str = "steps-not-recorded.txt";
/// The most bytes of [`STEPS_NOT_RECORDED_FILE`] (about 3 000 steps' names), inside the steps' budget.
pub const STEPS_NOT_RECORDED_MAX_BYTES: u64 = 16 * 1024;
/// The line ending [`STEPS_NOT_RECORDED_FILE`] when a step's name no longer fit in it.
pub const MORE_NOT_LISTED: &str = "+";

/// What [`STEPS_NOT_RECORDED_FILE`] says: the steps that ran on the node with no step file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StepsNotRecorded {
    /// The steps' names as SLURM gave them (each once, in the order they started).
    pub steps: Vec<String>,
    /// More steps than `steps` went unrecorded (the list itself was full): `steps.len()` is a floor.
    pub more: bool,
}

impl StepsNotRecorded {
    /// Parses the file's bytes: one valid step name ([`step_file_name`]) per line; other lines
    /// (a torn last line, garbage) are skipped; a name listed twice counts once.
    pub fn parse(bytes: &[u8]) -> StepsNotRecorded {
        let mut out = StepsNotRecorded::default();
        let mut seen = std::collections::HashSet::new();
        for line in bytes.split(|&b| b == b'\n') {
            let Ok(line) = std::str::from_utf8(line) else {
                continue;
            };
            if line == MORE_NOT_LISTED {
                out.more = true;
            } else if step_file_name(line).is_some() && seen.insert(line) {
                out.steps.push(line.to_string());
            }
        }
        out
    }

    /// The line the plugin appends for `step`, `None` for a name that is not a valid step name.
    pub fn line(step: &str) -> Option<String> {
        step_file_name(step).map(|_| format!("{step}\n"))
    }
}

pub use codec::decode_file;

#[cfg(test)]
mod steps_not_recorded_tests {
    use super::*;

    #[test]
    fn the_list_is_parsed_once_per_step_and_garbage_is_skipped() {
        let n = StepsNotRecorded::parse(b"67\n68\n67\n../etc\n\xff\xfe\n+\n69\n7");
        // "7" is a torn last line or a whole one: a valid name either way, counted.
        assert_eq!(n.steps, vec!["67", "68", "69", "7"]);
        assert!(n.more);
        assert_eq!(StepsNotRecorded::parse(b""), StepsNotRecorded::default());
        assert_eq!(StepsNotRecorded::line("12").as_deref(), Some("12\n"));
        assert_eq!(StepsNotRecorded::line("a\nb"), None);
        assert_eq!(StepsNotRecorded::line(""), None);
    }
}
