//! cgroup v1 readers: one typed function per control file, each taking the cgroup directory.
//!
//! Kernel docs: Documentation/admin-guide/cgroup-v1/cpuacct.rst and memory.rst.
//! A job's cgroup lives in the memory and cpuacct hierarchies (`<mnt>/{memory,cpuacct}/<rel>`,
//! found by [`super::locate`]; SLURM's layout is described in `plugin/src/scope.rs`). There is no
//! blkio/pids/cpu job cgroup, so I/O comes from `/proc/<pid>/io` (see [`crate::procio`]) and
//! throttling/PSI are not available.
use super::parse::{self, MemStatV1, OomControlV1};
use super::{read_keyed, read_single, Error, Lenient};
use std::path::Path;

pub const CPUACCT_USAGE: &str = "cpuacct.usage";
pub const CPUACCT_USAGE_USER: &str = "cpuacct.usage_user";
pub const CPUACCT_USAGE_SYS: &str = "cpuacct.usage_sys";
pub const CPUACCT_USAGE_PERCPU: &str = "cpuacct.usage_percpu";
pub const MEMORY_USAGE_IN_BYTES: &str = "memory.usage_in_bytes";
pub const MEMORY_MAX_USAGE_IN_BYTES: &str = "memory.max_usage_in_bytes";
pub const MEMORY_LIMIT_IN_BYTES: &str = "memory.limit_in_bytes";
pub const MEMORY_STAT: &str = "memory.stat";
pub const MEMORY_FAILCNT: &str = "memory.failcnt";
pub const MEMORY_OOM_CONTROL: &str = "memory.oom_control";
pub const TASKS: &str = "tasks";

/// `cpuacct.usage`: total CPU time of the cgroup and its descendants, ns. Hierarchical: at the job
/// level it keeps the time of steps whose cgroups were already removed (measured).
pub fn read_cpuacct_usage_ns(dir: &Path) -> Result<u64, Error> {
    read_single(&dir.join(CPUACCT_USAGE), parse::parse_u64)
}

/// `cpuacct.usage_user`: user CPU time, ns (kernel ≥ 4.7).
pub fn read_cpuacct_usage_user_ns(dir: &Path) -> Result<u64, Error> {
    read_single(&dir.join(CPUACCT_USAGE_USER), parse::parse_u64)
}

/// `cpuacct.usage_sys`: system CPU time, ns (kernel ≥ 4.7).
pub fn read_cpuacct_usage_sys_ns(dir: &Path) -> Result<u64, Error> {
    read_single(&dir.join(CPUACCT_USAGE_SYS), parse::parse_u64)
}

/// `cpuacct.usage_percpu`: CPU time per possible CPU, ns.
pub fn read_cpuacct_usage_percpu_ns(dir: &Path) -> Result<Vec<u64>, Error> {
    read_single(&dir.join(CPUACCT_USAGE_PERCPU), parse::parse_u64_list)
}

/// `memory.usage_in_bytes` (page cache included).
pub fn read_memory_usage_in_bytes(dir: &Path) -> Result<u64, Error> {
    read_single(&dir.join(MEMORY_USAGE_IN_BYTES), parse::parse_u64)
}

/// `memory.max_usage_in_bytes`: high-water mark of `usage_in_bytes`.
pub fn read_memory_max_usage_in_bytes(dir: &Path) -> Result<u64, Error> {
    read_single(&dir.join(MEMORY_MAX_USAGE_IN_BYTES), parse::parse_u64)
}

/// `memory.limit_in_bytes`; `None` when unlimited (see [`parse::V1_UNLIMITED_THRESHOLD`]).
/// Under SLURM this is the job's `--mem`.
pub fn read_memory_limit_in_bytes(dir: &Path) -> Result<Option<u64>, Error> {
    read_single(&dir.join(MEMORY_LIMIT_IN_BYTES), parse::parse_limit_v1)
}

/// `memory.stat`, `total_*` fields (see [`MemStatV1`]).
pub fn read_memory_stat_v1(dir: &Path) -> Result<MemStatV1, Error> {
    memory_stat_v1(dir)?.strict()
}

pub(crate) fn memory_stat_v1(dir: &Path) -> Result<Lenient<MemStatV1>, Error> {
    read_keyed(&dir.join(MEMORY_STAT), parse::parse_memory_stat_v1)
}

/// `memory.failcnt`: how often usage hit the limit (reclaim was forced).
pub fn read_memory_failcnt(dir: &Path) -> Result<u64, Error> {
    read_single(&dir.join(MEMORY_FAILCNT), parse::parse_u64)
}

/// `memory.oom_control`: `oom_kill_disable`, `under_oom`, `oom_kill`.
pub fn read_memory_oom_control(dir: &Path) -> Result<OomControlV1, Error> {
    memory_oom_control(dir)?.strict()
}

pub(crate) fn memory_oom_control(dir: &Path) -> Result<Lenient<OomControlV1>, Error> {
    read_keyed(&dir.join(MEMORY_OOM_CONTROL), parse::parse_oom_control_v1)
}

/// `tasks`: thread ids in this cgroup only (not descendants).
pub fn read_tasks(dir: &Path) -> Result<Vec<u32>, Error> {
    let mut v = Vec::new();
    super::read_ids_into(&dir.join(TASKS), &mut v)?;
    Ok(v)
}
