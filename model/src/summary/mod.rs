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
    /// Share of the job's runnable time on this node (its threads running or waiting for a CPU)
    /// spent waiting for a CPU over the interval, percent (the kernel view; absent without it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_wait_pct: Option<f64>,
    /// Mean number of the job's threads runnable (running or waiting for a CPU) over the interval:
    /// their runnable time per second (the kernel view). More than the cores allocated is
    /// oversubscription. It weighs `cpu_wait_pct` when points are merged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runnable_threads: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CpuTotals {
    /// CPU time of the job's cgroups (v1 `cpuacct.usage`, v2 `cpu.stat usage_usec`).
    pub usage_s: Option<f64>,
    /// User CPU time as the kernel counts it (v1 `cpuacct.usage_user`, v2 `user_usec`). On cgroup
    /// v1 the split is tick-based and need not add up to `usage_s`: reports show it scaled to
    /// `usage_s`.
    pub user_s: Option<f64>,
    /// System CPU time as the kernel counts it (v1 `cpuacct.usage_sys`, v2 `system_usec`); see
    /// `user_s`.
    pub system_s: Option<f64>,
    /// CFS quota throttling (v2 `cpu.stat throttled_usec`): wall time the job's cgroup was held off
    /// the CPU by its quota. `None` where the kernel gives nothing (no cpu job cgroup on v1).
    pub throttled_s: Option<f64>,
    /// Quota periods in which the job's cgroup was throttled (v2 `cpu.stat nr_throttled`).
    #[serde(default)]
    pub throttled_periods: Option<u64>,
}

impl CpuTotals {
    /// The user/system split as a report shows it: scaled to add up to `usage_s`. The kernel's
    /// split is counted apart from the total: on cgroup v1 `cpuacct.usage` counts nanoseconds and
    /// the split ticks, so user + system can be more (or less) than the total, and no part may
    /// read larger than the whole. Without a total, or without a split, the split as counted.
    /// The archived figures stay as counted.
    pub fn split_s(&self) -> (Option<f64>, Option<f64>) {
        let finite = |v: Option<f64>| v.filter(|v| v.is_finite() && *v >= 0.0);
        let (total, user, system) = (
            finite(self.usage_s),
            finite(self.user_s),
            finite(self.system_s),
        );
        match (total, user, system) {
            (Some(t), Some(u), Some(s)) if u + s > 0.0 => {
                let k = t / (u + s);
                (Some(u * k), Some(s * k))
            }
            (Some(t), u, s) => (u.map(|u| u.min(t)), s.map(|s| s.min(t))),
            (None, u, s) => (u, s),
        }
    }
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

// The class enum is `crate::kernel_abi::SysClass`; the doc line below is published as the
// schema's description (docs/schema/job-summary.schema.json), so it keeps its words.
/// System calls by class (`crate::kernel::SysClass`), counted by the collector's BPF program.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SyscallCounts {
    pub file: u64,
    pub network: u64,
    pub memory: u64,
    pub process: u64,
    pub sync: u64,
    pub other: u64,
}

impl SyscallCounts {
    pub fn total(&self) -> u64 {
        [
            self.file,
            self.network,
            self.memory,
            self.process,
            self.sync,
            self.other,
        ]
        .iter()
        .fold(0u64, |a, b| a.saturating_add(*b))
    }
    /// Each class with its count, in `SysClass` order.
    pub fn by_class(&self) -> [(crate::kernel_abi::SysClass, u64); 6] {
        use crate::kernel_abi::SysClass as C;
        [
            (C::File, self.file),
            (C::Net, self.network),
            (C::Mem, self.memory),
            (C::Proc, self.process),
            (C::Sync, self.sync),
            (C::Other, self.other),
        ]
    }
    fn add(&mut self, o: &SyscallCounts) {
        self.file = self.file.saturating_add(o.file);
        self.network = self.network.saturating_add(o.network);
        self.memory = self.memory.saturating_add(o.memory);
        self.process = self.process.saturating_add(o.process);
        self.sync = self.sync.saturating_add(o.sync);
        self.other = self.other.saturating_add(o.other);
    }
}

/// The kernel's view of the job's tasks (the collector `jobscope-kernel`, BPF; `crate::kernel`):
/// absent where no collector ran. Each figure is absent when it was not seen, never 0 for
/// unknown. Nothing about what the job did beyond these counts (no arguments, no file names).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct KernelTotals {
    /// System calls by class; absent while the collector did not count them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syscalls: Option<SyscallCounts>,
    /// `read`s asking for fewer than 4 KiB.
    pub small_reads: Option<u64>,
    /// `write`s giving fewer than 4 KiB.
    pub small_writes: Option<u64>,
    /// Context switches the tasks asked for (blocking, sleeping, waiting for I/O or a lock).
    pub ctx_switches_voluntary: Option<u64>,
    /// Context switches the tasks did not ask for (preempted: another task took the CPU).
    pub ctx_switches_involuntary: Option<u64>,
    /// Time the tasks ran on a CPU, as the scheduler counts it.
    pub run_s: Option<f64>,
    /// Time the tasks were runnable but waiting for a CPU.
    pub cpu_wait_s: Option<f64>,
    pub net_sent_bytes: Option<u64>,
    pub net_received_bytes: Option<u64>,
    /// Socket sends and receives that moved data.
    pub net_sends: Option<u64>,
    pub net_receives: Option<u64>,
    /// Bytes the tasks read from block devices (page-cache hits are not here).
    pub block_read_bytes: Option<u64>,
    /// Bytes the tasks wrote to block devices themselves (direct and synchronous I/O).
    pub block_write_bytes: Option<u64>,
    /// Page-cache bytes their buffered writes dirtied (the kernel writes them back later).
    pub dirtied_bytes: Option<u64>,
}

impl KernelTotals {
    /// Share of the tasks' runnable time (running + waiting for a CPU) spent waiting, percent.
    pub fn cpu_wait_pct(&self) -> Option<f64> {
        match (self.run_s, self.cpu_wait_s) {
            (Some(r), Some(w)) if r + w > 0.0 => Some(100.0 * w / (r + w)),
            _ => None,
        }
    }
    /// The sum over nodes: each figure over the nodes that have it (absent when none has).
    pub fn sum<'a>(nodes: impl IntoIterator<Item = &'a KernelTotals>) -> Option<KernelTotals> {
        let mut t: Option<KernelTotals> = None;
        fn add_u(a: &mut Option<u64>, b: Option<u64>) {
            if let Some(b) = b {
                *a = Some(a.unwrap_or(0).saturating_add(b));
            }
        }
        fn add_f(a: &mut Option<f64>, b: Option<f64>) {
            if let Some(b) = b {
                *a = Some(a.unwrap_or(0.0) + b);
            }
        }
        for n in nodes {
            let t = t.get_or_insert_with(KernelTotals::default);
            if let Some(s) = &n.syscalls {
                t.syscalls.get_or_insert_with(SyscallCounts::default).add(s);
            }
            add_u(&mut t.small_reads, n.small_reads);
            add_u(&mut t.small_writes, n.small_writes);
            add_u(&mut t.ctx_switches_voluntary, n.ctx_switches_voluntary);
            add_u(&mut t.ctx_switches_involuntary, n.ctx_switches_involuntary);
            add_f(&mut t.run_s, n.run_s);
            add_f(&mut t.cpu_wait_s, n.cpu_wait_s);
            add_u(&mut t.net_sent_bytes, n.net_sent_bytes);
            add_u(&mut t.net_received_bytes, n.net_received_bytes);
            add_u(&mut t.net_sends, n.net_sends);
            add_u(&mut t.net_receives, n.net_receives);
            add_u(&mut t.block_read_bytes, n.block_read_bytes);
            add_u(&mut t.block_write_bytes, n.block_write_bytes);
            add_u(&mut t.dirtied_bytes, n.dirtied_bytes);
        }
        t
    }
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

// `Default`: an empty node (no name, job and uid 0, no time), a base to build one from field by
// field; each measurement in it is unknown (`None`) or empty. (A `//` comment: a doc comment
// would become the schema's description.)
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
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
    /// The kernel's view of the job's tasks on this node; absent without a collector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<KernelTotals>,
    /// Steps that ran on this node without a step file (the spool's share for step files was full):
    /// the step table lacks them; the node's totals come from the job's cgroup and include them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps_not_recorded: Option<crate::spool::StepsNotRecorded>,
    /// What the site's rules over running jobs did about the job on this node (warnings,
    /// cancellations), oldest first (docs/watch.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interventions: Vec<crate::watch::Intervention>,
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
    /// The kernel's view over the nodes that had a collector; absent when none had.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<KernelTotals>,
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

#[cfg(test)]
mod cpu_split_tests {
    use super::CpuTotals;

    fn cpu(usage: Option<f64>, user: Option<f64>, system: Option<f64>) -> CpuTotals {
        CpuTotals {
            usage_s: usage,
            user_s: user,
            system_s: system,
            ..Default::default()
        }
    }

    /// cgroup v1: the tick-based split can add up to more than the total (15.6 + 0.2 of 15.5 s
    /// seen on the test cluster): shown scaled, no part is larger than the whole.
    #[test]
    fn the_split_shown_adds_up_to_the_total() {
        let (u, s) = cpu(Some(15.5), Some(15.6), Some(0.2)).split_s();
        let (u, s) = (u.unwrap(), s.unwrap());
        assert!(u <= 15.5 && s <= 15.5, "{u} {s}");
        assert!((u + s - 15.5).abs() < 1e-9, "{u} + {s}");
        assert!((u / s - 78.0).abs() < 1e-9, "the proportion stays");
        // Less than the total (ticks not yet counted): scaled up the same way.
        let (u, s) = cpu(Some(10.0), Some(6.0), Some(2.0)).split_s();
        assert_eq!((u, s), (Some(7.5), Some(2.5)));
        // v2: user + system is the total; nothing changes.
        assert_eq!(
            cpu(Some(1.0), Some(0.75), Some(0.25)).split_s(),
            (Some(0.75), Some(0.25))
        );
        // One part only, or no split: capped at the total, or as counted without one.
        assert_eq!(cpu(Some(2.0), Some(3.0), None).split_s(), (Some(2.0), None));
        assert_eq!(
            cpu(Some(2.0), Some(0.0), Some(0.0)).split_s(),
            (Some(0.0), Some(0.0))
        );
        assert_eq!(
            cpu(None, Some(3.0), Some(1.0)).split_s(),
            (Some(3.0), Some(1.0))
        );
        assert_eq!(
            cpu(Some(f64::NAN), Some(3.0), Some(1.0)).split_s(),
            (Some(3.0), Some(1.0))
        );
    }
}
