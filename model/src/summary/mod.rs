//! What the epilog archives: one [`NodeSummary`] per node, combined into one [`JobSummary`] per job.
//!
//! The archived JSON is described by `docs/schema/job-summary.schema.json`; bump [`SCHEMA_VERSION`]
//! on any incompatible change. Every field that could not be measured is absent (`null`), never 0.

pub mod analysis;
pub mod job;
pub mod node;

use crate::sample::CgroupVersion;
use serde::{Deserialize, Serialize};

/// 2: `uid` is optional (was `u32::MAX` when unknown), `gid` and `group` added, and a stored
/// `analysis` of a version-1 document is not carried over on upgrade (archive/src/store.rs `load`).
pub const SCHEMA_VERSION: u32 = 2;

/// One point of a node's timeline (after thinning: one bucket).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Point {
    /// Seconds since the job started on this node (end of the bucket).
    pub t_s: f64,
    /// Mean busy cores over the interval ending here.
    pub busy_cores: Option<f64>,
    /// Highest busy cores seen within the interval (survives thinning).
    pub busy_cores_max: Option<f64>,
    pub mem_bytes: Option<u64>,
    pub mem_bytes_max: Option<u64>,
    pub io_bytes_per_s: Option<f64>,
    pub tasks: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CpuTotals {
    pub usage_s: Option<f64>,
    pub user_s: Option<f64>,
    pub system_s: Option<f64>,
    /// CFS quota throttling (v2 `cpu.stat throttled_usec`): wall time the job's cgroup was held off
    /// the CPU by its quota. `None` where the kernel gives nothing (no cpu job cgroup on v1).
    pub throttled_s: Option<f64>,
    /// Quota periods in which the job's cgroup was throttled (v2 `cpu.stat nr_throttled`).
    #[serde(default)]
    pub throttled_periods: Option<u64>,
}

/// Pressure stall information (cgroup v2 `cpu.pressure`, `memory.pressure`, `io.pressure`): the
/// share of wall time the job's tasks were stalled waiting for a resource. Absent where the kernel
/// gives none (cgroup v1, PSI off): never 0 for "unknown".
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Pressure {
    /// Wall time the shares are measured over: from the first to the last reading with pressure
    /// figures (on a job, summed over its nodes).
    pub window_s: f64,
    /// At least one task waited for a CPU (`cpu.pressure some`), percent of wall time.
    pub cpu_some_pct: Option<f64>,
    /// At least one task waited for memory (reclaim, swap-in, refaults; `memory.pressure some`).
    pub mem_some_pct: Option<f64>,
    /// All non-idle tasks waited for memory at once (`memory.pressure full`).
    pub mem_full_pct: Option<f64>,
    /// At least one task waited for I/O (`io.pressure some`).
    pub io_some_pct: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MemTotals {
    /// High-water mark of the cgroup's charged memory (what SLURM's limit is enforced on).
    pub peak_bytes: Option<u64>,
    pub limit_bytes: Option<u64>,
    /// Largest anonymous (rss) memory seen.
    pub rss_peak_bytes: Option<u64>,
    /// Largest page cache seen (counted against the cgroup limit, reclaimable).
    pub cache_peak_bytes: Option<u64>,
    /// Largest shmem/tmpfs seen (counted against the limit, NOT reclaimable without swap).
    pub shmem_peak_bytes: Option<u64>,
    pub swap_peak_bytes: Option<u64>,
    pub failcnt: Option<u64>,
    pub oom_events: Option<u64>,
    pub oom_kill_events: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct IoTotals {
    pub read_bytes: Option<u64>,
    pub write_bytes: Option<u64>,
    pub read_ops: Option<u64>,
    pub write_ops: Option<u64>,
    /// Highest read+write rate over one sampling interval.
    pub peak_bytes_per_s: Option<f64>,
    /// Where I/O figures come from: `io.stat` (v2 with the io controller enabled for the job) or
    /// `proc` (the sum of /proc/<pid>/io over the job's processes: v1, and v2 without it).
    pub source: Option<String>,
}

/// One job step on one node, measured in its own cgroup.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StepSummary {
    /// `batch`, `extern`, `0`, `1`…
    pub step: String,
    pub start_unix_ms: Option<u64>,
    pub end_unix_ms: Option<u64>,
    pub elapsed_s: Option<f64>,
    pub cpu_s: Option<f64>,
    pub mem_peak_bytes: Option<u64>,
    pub exit_status: Option<i32>,
}

/// Data quality: what the report can and cannot vouch for.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Quality {
    /// Raw samples taken (before thinning) plus final step readings.
    pub samples: u64,
    /// The sampler never wrote its end record (node crash, reboot, slurmstepd killed).
    pub sampler_ended_cleanly: bool,
    /// A torn or corrupt spool record was dropped.
    pub torn_records: bool,
    /// No final reading from a batch/srun step: counters may be up to one cadence stale.
    pub final_counters: bool,
    pub thinned: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NodeSummary {
    pub node: String,
    pub job_id: u32,
    pub uid: u32,
    pub start_unix_ms: u64,
    pub end_unix_ms: u64,
    pub elapsed_s: f64,
    pub alloc_cores: Option<u32>,
    pub alloc_mem_bytes: Option<u64>,
    pub cgroup_version: Option<CgroupVersion>,
    pub cpu: CpuTotals,
    pub mem: MemTotals,
    pub io: IoTotals,
    pub tasks_max: Option<u64>,
    pub threads_max: Option<u64>,
    /// Share of allocated core-time used on this node, percent.
    pub cpu_efficiency_pct: Option<f64>,
    pub steps: Vec<StepSummary>,
    pub timeline: Vec<Point>,
    pub quality: Quality,
    /// The user's `--jobscope-*` options as handed over by job_prolog (validated there).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub user_options: std::collections::BTreeMap<String, String>,
    /// The job's GPUs on this node (empty: none allocated, or GPU sampling off).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<crate::gpu::GpuSummary>,
    /// Stalls on CPU, memory and I/O (cgroup v2 only; absent on v1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pressure: Option<Pressure>,
    /// SHA-256 (lower-case hex) of the batch script this node ran, as the plugin read it in the
    /// batch step (`plugin/src/script.rs`); absent on nodes without the batch step, for jobs with
    /// no batch script (`srun`, `salloc`), and when the script could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script_sha256: Option<String>,
    /// Steps that ran on this node without a step file (the spool's share for step files was full):
    /// the step table lacks them; the node's totals come from the job's cgroup and include them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps_not_recorded: Option<crate::spool::StepsNotRecorded>,
}

/// Efficiency figures, each in percent of what was allocated.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Efficiency {
    /// CPU time ÷ (allocated cores × elapsed), whole allocation.
    pub cpu_pct: Option<f64>,
    /// Largest node peak ÷ per-node memory allocation.
    pub mem_pct: Option<f64>,
    /// Elapsed ÷ time limit.
    pub time_pct: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Allocation {
    pub nodes: u32,
    /// Cores over all nodes.
    pub cores: Option<u32>,
    /// Memory per node.
    pub mem_per_node_bytes: Option<u64>,
    pub gpus: Option<String>,
    pub time_limit_s: Option<u64>,
}

/// One job, all nodes. This is the archived document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct JobSummary {
    pub schema_version: u32,
    pub generator: String,
    pub cluster: Option<String>,
    pub job_id: u32,
    pub array_job_id: Option<u32>,
    pub array_task_id: Option<u32>,
    pub name: Option<String>,
    pub user: Option<String>,
    /// The job's user id; absent when neither SLURM nor the spool said (version 1 wrote 4294967295).
    pub uid: Option<u32>,
    /// The job's group id (SLURM's job gid); absent when unknown.
    pub gid: Option<u32>,
    /// The name of `gid` on the node that archived the job; absent when unknown or unresolvable.
    pub group: Option<String>,
    pub account: Option<String>,
    pub partition: Option<String>,
    /// The job's quality of service as SLURM named it; absent when SLURM gave none (a cluster
    /// without accounting says `(null)`), and in documents written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<String>,
    /// When the job was submitted (SLURM's submit time, whole seconds); absent when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submit_unix_s: Option<u64>,
    /// SHA-256 (lower-case hex) of the job's batch script (the batch host's
    /// [`NodeSummary::script_sha256`]): the same script under another job name has the same hash.
    /// Absent for jobs without a batch script and when it could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script_sha256: Option<String>,
    /// How the job ended: COMPLETED, FAILED, TIMEOUT, OUT_OF_MEMORY, CANCELLED, NODE_FAIL…
    pub state: crate::job::JobState,
    /// Why that state was concluded (the evidence, typed; the presenter words it). Schema version 1
    /// stored words as `state_reason`: they read back as [`crate::job::EndReason::Legacy`].
    #[serde(
        default,
        alias = "state_reason",
        deserialize_with = "crate::job::deserialize_end_reason",
        skip_serializing_if = "Option::is_none"
    )]
    pub end_reason: Option<crate::job::EndReason>,
    pub exit_code: Option<i32>,
    /// The job's start from the best source (`job::best_start_ms`): a node's millisecond record
    /// when it fits SLURM's start second, else SLURM's.
    pub start_unix_ms: u64,
    pub end_unix_ms: u64,
    pub elapsed_s: f64,
    /// SLURM's own start time (whole seconds), as the scheduler gave it; absent when it gave none.
    /// The archive keys runs by it (`archive/src/store.rs` `Key::of`), as users know it from sacct.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_start_unix_s: Option<u64>,
    pub alloc: Allocation,
    pub cpu: CpuTotals,
    pub mem: MemTotals,
    pub io: IoTotals,
    /// Stalls on CPU, memory and I/O over all nodes that reported them (weighted by each node's
    /// window); absent when no node did (cgroup v1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pressure: Option<Pressure>,
    pub efficiency: Efficiency,
    pub nodes: Vec<NodeSummary>,
    /// Nodes of the allocation whose data never arrived.
    pub missing_nodes: Vec<String>,
    /// Something is missing (a node, the final counters, the sampler's end): numbers are a lower bound.
    pub partial: bool,
    pub partial_reasons: Vec<String>,
    pub samples: u64,
    /// The user's `--jobscope-*` options (e.g. `mail`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub user_options: std::collections::BTreeMap<String, String>,
    /// Analysis added by the report layer (scalability, classification, advice…).
    /// Read leniently ([`analysis::deserialize_lenient`]): an older, untyped analysis reads as absent.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "analysis::deserialize_lenient"
    )]
    pub analysis: Option<analysis::Analysis>,
}

/// The JSON Schema of the archived [`JobSummary`] (published as docs/schema/job-summary.schema.json).
pub fn json_schema() -> serde_json::Value {
    let mut v = serde_json::to_value(schemars::schema_for!(JobSummary)).expect("schema serialises");
    if let Some(o) = v.as_object_mut() {
        o.insert(
            "$id".into(),
            serde_json::Value::String(format!(
                "https://jobscope.invalid/schema/job-summary/v{SCHEMA_VERSION}.json"
            )),
        );
        o.insert(
            "title".into(),
            serde_json::Value::String(format!(
                "jobscope job summary, schema_version {SCHEMA_VERSION}"
            )),
        );
    }
    v
}
