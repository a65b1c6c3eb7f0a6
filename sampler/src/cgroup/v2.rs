//! cgroup v2 readers: one typed function per control file, each taking the cgroup directory.
//!
//! Kernel doc: Documentation/admin-guide/cgroup-v2.rst (sections "Core Interface Files", "CPU",
//! "Memory", "IO", "PID", "PSI"). A job's cgroup is one directory `<mnt>/<rel>` (found by
//! [`super::locate`]; `<mnt>` is `/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` on hybrid hosts;
//! SLURM's layout is described in `plugin/src/scope.rs`). v2 files are hierarchical: the job
//! directory covers all its sub-cgroups, including one the scheduler's own process may sit in.
use super::parse::{self, CpuStatV2, IoStatV2, MemEventsV2, MemStatV2, Pressure};
use super::{read_keyed, read_single, Error, Lenient};
use std::path::Path;

pub const CPU_STAT: &str = "cpu.stat";
pub const MEMORY_CURRENT: &str = "memory.current";
pub const MEMORY_PEAK: &str = "memory.peak";
pub const MEMORY_MAX: &str = "memory.max";
pub const MEMORY_STAT: &str = "memory.stat";
pub const MEMORY_SWAP_CURRENT: &str = "memory.swap.current";
pub const MEMORY_EVENTS: &str = "memory.events";
pub const IO_STAT: &str = "io.stat";
pub const PIDS_CURRENT: &str = "pids.current";
pub const CGROUP_THREADS: &str = "cgroup.threads";
pub const CPU_PRESSURE: &str = "cpu.pressure";
pub const MEMORY_PRESSURE: &str = "memory.pressure";
pub const IO_PRESSURE: &str = "io.pressure";

/// `cpu.stat`: always present (usage from rstat); throttling keys need the cpu controller.
pub fn read_cpu_stat(dir: &Path) -> Result<CpuStatV2, Error> {
    cpu_stat(dir)?.strict()
}

pub(crate) fn cpu_stat(dir: &Path) -> Result<Lenient<CpuStatV2>, Error> {
    read_keyed(&dir.join(CPU_STAT), parse::parse_cpu_stat_v2)
}

/// `memory.current`, bytes (page cache included).
pub fn read_memory_current_bytes(dir: &Path) -> Result<u64, Error> {
    read_single(&dir.join(MEMORY_CURRENT), parse::parse_u64)
}

/// `memory.peak`, bytes (kernel ≥ 5.19; `Gone` = absent before).
pub fn read_memory_peak_bytes(dir: &Path) -> Result<u64, Error> {
    read_single(&dir.join(MEMORY_PEAK), parse::parse_u64)
}

/// `memory.max`, bytes; `None` for `max` (unlimited).
pub fn read_memory_max_bytes(dir: &Path) -> Result<Option<u64>, Error> {
    read_single(&dir.join(MEMORY_MAX), parse::parse_max_or_u64)
}

/// `memory.stat` (see [`MemStatV2`]).
pub fn read_memory_stat_v2(dir: &Path) -> Result<MemStatV2, Error> {
    memory_stat_v2(dir)?.strict()
}

pub(crate) fn memory_stat_v2(dir: &Path) -> Result<Lenient<MemStatV2>, Error> {
    read_keyed(&dir.join(MEMORY_STAT), parse::parse_memory_stat_v2)
}

/// `memory.swap.current`, bytes (absent without swap accounting).
pub fn read_memory_swap_current_bytes(dir: &Path) -> Result<u64, Error> {
    read_single(&dir.join(MEMORY_SWAP_CURRENT), parse::parse_u64)
}

/// `memory.events` (hierarchical counts; `memory.events.local` is the non-hierarchical twin).
pub fn read_memory_events(dir: &Path) -> Result<MemEventsV2, Error> {
    memory_events(dir)?.strict()
}

pub(crate) fn memory_events(dir: &Path) -> Result<Lenient<MemEventsV2>, Error> {
    read_keyed(&dir.join(MEMORY_EVENTS), parse::parse_memory_events_v2)
}

/// `io.stat` summed over devices (absent when the io controller is not enabled for the cgroup).
pub fn read_io_stat(dir: &Path) -> Result<IoStatV2, Error> {
    io_stat(dir)?.strict()
}

pub(crate) fn io_stat(dir: &Path) -> Result<Lenient<IoStatV2>, Error> {
    read_keyed(&dir.join(IO_STAT), parse::parse_io_stat_v2)
}

/// `pids.current`: tasks (threads, not processes) in the cgroup and its descendants.
pub fn read_pids_current(dir: &Path) -> Result<u64, Error> {
    read_single(&dir.join(PIDS_CURRENT), parse::parse_u64)
}

/// `cgroup.threads`: thread ids in this cgroup only.
pub fn read_cgroup_threads(dir: &Path) -> Result<Vec<u32>, Error> {
    let mut v = Vec::new();
    super::read_ids_into(&dir.join(CGROUP_THREADS), &mut v)?;
    Ok(v)
}

/// `cpu.pressure` (PSI; `Unsupported` when booted with `psi=0`).
pub fn read_cpu_pressure(dir: &Path) -> Result<Pressure, Error> {
    pressure(dir, CPU_PRESSURE)?.strict()
}

/// `memory.pressure`.
pub fn read_memory_pressure(dir: &Path) -> Result<Pressure, Error> {
    pressure(dir, MEMORY_PRESSURE)?.strict()
}

/// `io.pressure`.
pub fn read_io_pressure(dir: &Path) -> Result<Pressure, Error> {
    pressure(dir, IO_PRESSURE)?.strict()
}

pub(crate) fn pressure(dir: &Path, file: &str) -> Result<Lenient<Pressure>, Error> {
    read_keyed(&dir.join(file), parse::parse_pressure)
}
