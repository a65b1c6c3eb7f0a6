//! One reading of a job (or step) cgroup.
//!
//! Every measurement is an `Option`: a value the kernel does not give (no `memory.peak` before 5.19,
//! no PSI on this kernel, no blkio job cgroup on v1) is `None`, never 0. Counters are cumulative as the
//! kernel reports them; rates are only ever derived from two readings that both have the value and
//! where the later one is not smaller (see [`rate_per_sec`]).

use serde::{Deserialize, Serialize};

/// Declares [`Reading`] once, and with it the stable field numbering the spool's binary encoding uses.
/// The number of a field is its position here: NEVER reorder or remove, only append (the spool
/// format version must change otherwise).
macro_rules! reading_fields {
    ($( $(#[$doc:meta])* $name:ident ),* $(,)?) => {
        /// Cumulative counters and gauges of one cgroup at one instant. Units are in the names.
        #[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
        pub struct Reading {
            $( $(#[$doc])* #[serde(default, skip_serializing_if = "Option::is_none")] pub $name: Option<u64>, )*
        }
        impl Reading {
            /// Field names in spool order.
            pub const FIELD_NAMES: &'static [&'static str] = &[$(stringify!($name)),*];
            /// All fields in spool order.
            pub fn fields(&self) -> Vec<Option<u64>> { vec![$(self.$name),*] }
            /// Builds a reading from fields in spool order; extra trailing fields (from a newer
            /// writer with the same major format) are ignored, missing ones are `None`.
            pub fn from_fields(v: &[Option<u64>]) -> Self {
                let mut it = v.iter().copied();
                Reading { $( $name: it.next().flatten(), )* }
            }
        }
    };
}

reading_fields! {
    /// Total CPU time (v1 `cpuacct.usage`, v2 `cpu.stat usage_usec` × 1000).
    cpu_usage_ns,
    /// User CPU time (v1 `cpuacct.usage_user`, v2 `user_usec` × 1000).
    cpu_user_ns,
    /// System CPU time.
    cpu_system_ns,
    /// Number of CPUs that ran this cgroup since the previous reading (from v1 `usage_percpu`).
    cpus_active,
    /// v2 `cpu.stat throttled_usec` (CFS quota throttling).
    cpu_throttled_usec,
    /// v2 `cpu.stat nr_throttled`.
    cpu_nr_throttled,
    /// v1 `memory.usage_in_bytes`, v2 `memory.current`.
    mem_current_bytes,
    /// High-water mark: v1 `memory.max_usage_in_bytes`, v2 `memory.peak`.
    mem_peak_bytes,
    /// Limit: v1 `memory.limit_in_bytes`, v2 `memory.max` (`None` when unlimited).
    mem_limit_bytes,
    /// Anonymous memory: v1 `total_rss`, v2 `anon`.
    mem_rss_bytes,
    /// Page cache: v1 `total_cache`, v2 `file`.
    mem_cache_bytes,
    /// Shared memory (tmpfs, SysV): v1 `total_shmem`, v2 `shmem`.
    mem_shmem_bytes,
    /// Mapped file pages: v1 `total_mapped_file`, v2 `file_mapped`.
    mem_mapped_file_bytes,
    /// Swap: v1 `total_swap`, v2 `memory.swap.current`.
    mem_swap_bytes,
    /// v1 `memory.failcnt`: times usage hit the limit.
    mem_failcnt,
    /// v2 `memory.events oom` / v1 not available.
    mem_oom_events,
    /// v2 `memory.events oom_kill`, v1 `memory.oom_control oom_kill`.
    mem_oom_kill_events,
    /// v2 `memory.events high`.
    mem_high_events,
    /// v2 `memory.events max`.
    mem_max_events,
    /// Processes in the cgroup (v1 `tasks`/`cgroup.procs` count, v2 `pids.current` or procs count).
    tasks,
    /// Threads in the cgroup.
    threads,
    /// Bytes read from storage (v2 `io.stat rbytes`; v1 sum of `/proc/<pid>/io read_bytes`).
    io_read_bytes,
    /// Bytes written to storage.
    io_write_bytes,
    /// Read operations (v2 `rios`; v1 `syscr`).
    io_read_ops,
    /// Write operations (v2 `wios`; v1 `syscw`).
    io_write_ops,
    /// PSI `cpu.pressure some total` (µs).
    psi_cpu_some_usec,
    /// PSI `memory.pressure some total` (µs).
    psi_mem_some_usec,
    /// PSI `memory.pressure full total` (µs).
    psi_mem_full_usec,
    /// PSI `io.pressure some total` (µs).
    psi_io_some_usec,
    /// Step readings only (never in buckets): `read_bytes` of the step's slurmstepd that came
    /// from the children it reaped, i.e. the step's tasks and everything they reaped, recursively
    /// (`jobscope_sampler::procio::reaped_io`). Cumulative: a step's figure is its exit value minus
    /// its start value. Exact even for processes that lived between two samples.
    reaped_read_bytes,
    /// Step readings only: the same for `write_bytes`.
    reaped_write_bytes,
    /// Step readings only: the same for `syscr`.
    reaped_read_ops,
    /// Step readings only: the same for `syscw`.
    reaped_write_ops,
    /// The kernel view (`crate::kernel`, the collector `jobscope-kernel`): the job's tasks'
    /// system calls of class file I/O. The `kernel_*` fields are the job's counters on this node,
    /// cumulative from its start, read from the collector's map; `None` without a collector,
    /// and the system-call classes also while it does not count system calls.
    kernel_syscalls_file,
    /// System calls: sockets.
    kernel_syscalls_net,
    /// System calls: memory mapping.
    kernel_syscalls_mem,
    /// System calls: processes (clone, exec, wait, kill…).
    kernel_syscalls_proc,
    /// System calls: synchronisation (futex, sched_yield, semop…).
    kernel_syscalls_sync,
    /// System calls: all others.
    kernel_syscalls_other,
    /// `read`s asking for fewer than `crate::kernel_abi::SMALL_IO_BYTES`.
    kernel_small_reads,
    /// `write`s giving fewer than `crate::kernel_abi::SMALL_IO_BYTES`.
    kernel_small_writes,
    /// Voluntary context switches (the tasks' own `nvcsw`).
    kernel_ctx_voluntary,
    /// Involuntary context switches (`nivcsw`: preempted).
    kernel_ctx_involuntary,
    /// Time on a CPU as the scheduler counts it (`sum_exec_runtime`).
    kernel_run_ns,
    /// Time runnable but waiting for a CPU (`sched_info.run_delay`, schedstat's second field).
    kernel_runq_wait_ns,
    /// Payload bytes sent on IPv4/IPv6 sockets.
    kernel_net_tx_bytes,
    /// Payload bytes received on IPv4/IPv6 sockets.
    kernel_net_rx_bytes,
    /// Socket sends that moved data.
    kernel_net_tx_calls,
    /// Socket receives that moved data.
    kernel_net_rx_calls,
    /// Block I/O submitted by the job's tasks: bytes read from devices.
    kernel_blk_read_bytes,
    /// Block I/O submitted by the job's tasks: bytes written (direct and synchronous I/O; the
    /// kernel's later write-back of the page cache is not the job's task: see `kernel_dirtied_bytes`).
    kernel_blk_write_bytes,
    /// Page-cache bytes the job's buffered writes dirtied (written back to disk later).
    kernel_dirtied_bytes,
}

impl Reading {
    /// Sets the `kernel_*` fields from the collector's counters; the system-call classes, the
    /// small reads and writes and the dirtied page cache only when the collector's `state_flags`
    /// say it counts them (otherwise they stay `None`: not seen, not zero).
    pub fn set_kernel(&mut self, c: &crate::kernel_abi::Counters, state_flags: u64) {
        if state_flags & crate::kernel_abi::STATE_SYSCALLS != 0 {
            let [f, n, m, p, s, o] = c.syscalls;
            self.kernel_syscalls_file = Some(f);
            self.kernel_syscalls_net = Some(n);
            self.kernel_syscalls_mem = Some(m);
            self.kernel_syscalls_proc = Some(p);
            self.kernel_syscalls_sync = Some(s);
            self.kernel_syscalls_other = Some(o);
        }
        if state_flags & crate::kernel_abi::STATE_SMALL_IO != 0 {
            self.kernel_small_reads = Some(c.small_reads);
            self.kernel_small_writes = Some(c.small_writes);
        }
        self.kernel_ctx_voluntary = Some(c.ctx_voluntary);
        self.kernel_ctx_involuntary = Some(c.ctx_involuntary);
        self.kernel_run_ns = Some(c.run_ns);
        self.kernel_runq_wait_ns = Some(c.runq_wait_ns);
        self.kernel_net_tx_bytes = Some(c.net_tx_bytes);
        self.kernel_net_rx_bytes = Some(c.net_rx_bytes);
        self.kernel_net_tx_calls = Some(c.net_tx_calls);
        self.kernel_net_rx_calls = Some(c.net_rx_calls);
        self.kernel_blk_read_bytes = Some(c.blk_read_bytes);
        self.kernel_blk_write_bytes = Some(c.blk_write_bytes);
        if state_flags & crate::kernel_abi::STATE_PAGE_CACHE != 0 {
            self.kernel_dirtied_bytes = Some(c.dirtied_bytes);
        }
    }
}

/// Rate per second of a counter between two readings taken `dt_ms` apart.
/// `None` unless both values exist, the counter did not go backwards (reset, cgroup recreated)
/// and the interval is positive.
pub fn rate_per_sec(a: Option<u64>, b: Option<u64>, dt_ms: u64) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b >= a && dt_ms > 0 => Some((b - a) as f64 * 1000.0 / dt_ms as f64),
        _ => None,
    }
}

/// Busy cores (CPU-seconds per second) between two `cpu_usage_ns` values `dt_ms` apart.
pub fn busy_cores(a: Option<u64>, b: Option<u64>, dt_ms: u64) -> Option<f64> {
    rate_per_sec(a, b, dt_ms).map(|ns_per_s| ns_per_s / 1e9)
}

/// The kernel view's waiting for a CPU between two readings `dt_ms` apart, from the cumulative
/// `kernel_run_ns` and `kernel_runq_wait_ns`: (the share of the tasks' runnable time, running or
/// waiting, that they spent waiting, percent; the mean number of threads runnable, i.e. runnable
/// time per second of the interval). Each `None` where [`rate_per_sec`] gives no rate for either
/// counter (a reading without the kernel view, a counter that went backwards, no interval); the
/// share also when nothing was runnable (no share of nothing).
pub fn cpu_wait_between(a: &Reading, b: &Reading, dt_ms: u64) -> (Option<f64>, Option<f64>) {
    let (Some(run), Some(wait)) = (
        rate_per_sec(a.kernel_run_ns, b.kernel_run_ns, dt_ms),
        rate_per_sec(a.kernel_runq_wait_ns, b.kernel_runq_wait_ns, dt_ms),
    ) else {
        return (None, None);
    };
    let runnable = run + wait;
    let pct = (runnable > 0.0).then(|| 100.0 * wait / runnable);
    (pct, Some(runnable / 1e9))
}

/// Where a job's I/O figures come from. The job's cgroup counts its block I/O in `io.stat` only
/// where the io controller is enabled for it (cgroup v2; SLURM leaves it off unless the site turns
/// it on); everywhere else the sampler sums `/proc/<pid>/io` over the job's processes, and the
/// steps' reaped counters add what processes that ended between two samples did.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub enum IoSource {
    /// v2 `io.stat` of the job's cgroup.
    #[serde(rename = "io.stat")]
    IoStat,
    /// The sum of `/proc/<pid>/io` over the job's processes.
    #[serde(rename = "proc")]
    Proc,
}

impl IoSource {
    /// The name the report and the JSON use (`IoTotals::source`).
    pub fn name(self) -> &'static str {
        match self {
            IoSource::IoStat => "io.stat",
            IoSource::Proc => "proc",
        }
    }
}

/// Which hierarchy the job cgroup lives in.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum CgroupVersion {
    V1,
    V2,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_only_from_valid_pairs() {
        assert_eq!(rate_per_sec(Some(10), Some(30), 2000), Some(10.0));
        assert_eq!(rate_per_sec(None, Some(30), 2000), None);
        assert_eq!(
            rate_per_sec(Some(30), Some(10), 2000),
            None,
            "counter went backwards"
        );
        assert_eq!(rate_per_sec(Some(10), Some(30), 0), None);
        assert_eq!(busy_cores(Some(0), Some(4_000_000_000), 2000), Some(2.0));
    }

    /// A reading with the kernel view's run and wait times, in ms.
    fn kernel(run_ms: u64, wait_ms: u64) -> Reading {
        Reading {
            kernel_run_ns: Some(run_ms * 1_000_000),
            kernel_runq_wait_ns: Some(wait_ms * 1_000_000),
            ..Default::default()
        }
    }

    #[test]
    fn cpu_wait_is_a_share_of_runnable_time_between_two_readings() {
        // Over 2 s: 1.5 s more running (3.0 -> 4.5 s), 4.5 s more waiting (1.0 -> 5.5 s):
        // 4.5 / (1.5 + 4.5) = 75 % waiting; 6 s runnable in 2 s = 3 threads runnable.
        assert_eq!(
            cpu_wait_between(&kernel(3000, 1000), &kernel(4500, 5500), 2000),
            (Some(75.0), Some(3.0))
        );
        // Nothing runnable (all threads asleep): no share, 0 threads.
        assert_eq!(
            cpu_wait_between(&kernel(3000, 1000), &kernel(3000, 1000), 2000),
            (None, Some(0.0))
        );
        // Never waited: 0 %, not absent.
        assert_eq!(
            cpu_wait_between(&kernel(3000, 1000), &kernel(4000, 1000), 1000),
            (Some(0.0), Some(1.0))
        );
        // A counter that went backwards (a new job entry in the collector's map): nothing, never
        // a negative share.
        for (a, b) in [
            (kernel(3000, 1000), kernel(2000, 2000)),
            (kernel(3000, 1000), kernel(4000, 500)),
        ] {
            assert_eq!(cpu_wait_between(&a, &b, 2000), (None, None));
        }
        // A reading without the kernel view, or without one of the two counters; no interval.
        let no_wait = Reading {
            kernel_runq_wait_ns: None,
            ..kernel(9000, 0)
        };
        for (a, b, dt) in [
            (Reading::default(), kernel(4000, 1000), 2000),
            (kernel(3000, 1000), Reading::default(), 2000),
            (kernel(3000, 1000), no_wait, 2000),
            (kernel(3000, 1000), kernel(4000, 2000), 0),
        ] {
            assert_eq!(cpu_wait_between(&a, &b, dt), (None, None));
        }
    }

    #[test]
    fn field_order_round_trips() {
        let r = Reading {
            cpu_usage_ns: Some(5),
            psi_io_some_usec: Some(9),
            ..Default::default()
        };
        let f = r.fields();
        assert_eq!(f.len(), Reading::FIELD_NAMES.len());
        assert_eq!(Reading::from_fields(&f), r);
        assert_eq!(Reading::FIELD_NAMES[0], "cpu_usage_ns");
    }
}
