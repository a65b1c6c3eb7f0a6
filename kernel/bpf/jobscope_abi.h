/* The contract between the BPF programs (kernel/bpf/jobscope.bpf.c, loaded by the collector
 * `jobscope-kernel`) and their users in user space (jobscope-common's bpf_maps: the SPANK
 * plugin's tagger and sampler, `jobscope run`, the collector's sweep). Declared once in Rust by
 * model/src/kernel_abi.rs; the test kernel/tests/abi.rs compares the BTF of the compiled object
 * with the field list that declaration produces, so a change here that is not made there fails
 * the build's tests.
 *
 * Maps, pinned by the collector under JS_PIN_DIR (bpffs; the directory is 0700 root):
 *   jobs    PERCPU_HASH  key __u64 job key -> struct js_counters   (max_entries: the collector's
 *                         kernel.max_jobs; created by the tagger, deleted by the job's sampler at
 *                         its end or by the collector's sweep; the programs never create entries)
 *   tasks   TASK_STORAGE                 -> struct js_task        (set from user space through a
 *                         pidfd; the programs copy it to every child at fork)
 *   state   ARRAY[1]     __u32 0         -> struct js_state
 *   sysclass ARRAY[JS_MAX_SYSCALLS] __u32 nr -> __u32 class (enum js_sys_class), filled by the
 *                         collector before the programs attach
 *
 * A job key is the SLURM job id for jobs; `jobscope run` uses JS_KEY_RUN | pid of its child.
 */
#ifndef JOBSCOPE_ABI_H
#define JOBSCOPE_ABI_H

#define JS_ABI_VERSION 2
#define JS_PIN_DIR "/sys/fs/bpf/jobscope"
#define JS_MAX_SYSCALLS 512
#define JS_KEY_RUN (1ULL << 63)
/* a read or write asking for fewer bytes than this is "small" */
#define JS_SMALL_IO_BYTES 4096

enum js_sys_class {
	JS_SYS_FILE = 0,   /* file I/O: read, write, open, stat, ... */
	JS_SYS_NET = 1,    /* sockets: send, recv, connect, poll on sockets is "other" */
	JS_SYS_MEM = 2,    /* mmap, munmap, brk, mprotect, madvise */
	JS_SYS_PROC = 3,   /* clone, fork, execve, wait, exit, kill */
	JS_SYS_SYNC = 4,   /* futex, futex_waitv, sched_yield, semop, ... */
	JS_SYS_OTHER = 5,
	JS_SYS_NCLASS = 6,
};

/* Cumulative counters of one job on one node, one copy per CPU (readers sum them). */
struct js_counters {
	__u64 syscalls[JS_SYS_NCLASS]; /* by class; only while syscall counting is on */
	__u64 small_reads;             /* vfs_read calls asking for < JS_SMALL_IO_BYTES */
	__u64 small_writes;            /* vfs_write calls giving < JS_SMALL_IO_BYTES */
	__u64 ctx_voluntary;           /* the tasks' own nvcsw, summed as deltas */
	__u64 ctx_involuntary;         /* nivcsw */
	__u64 run_ns;                  /* se.sum_exec_runtime deltas: time on a CPU */
	__u64 runq_wait_ns;            /* sched_info.run_delay deltas: runnable, waiting for a CPU */
	__u64 net_tx_bytes;            /* payload bytes sent on AF_INET/AF_INET6 sockets */
	__u64 net_rx_bytes;
	__u64 net_tx_calls;            /* send calls that moved at least one byte */
	__u64 net_rx_calls;
	__u64 blk_read_bytes;          /* bios submitted in the job's tasks' context */
	__u64 blk_write_bytes;
	__u64 dirtied_bytes;           /* page-cache bytes dirtied by the job's buffered writes */
};

/* What a task's own hooks counted: every figure of js_counters but the scheduler's four, in the
 * same order. */
struct js_own {
	__u64 syscalls[JS_SYS_NCLASS];
	__u64 small_reads;
	__u64 small_writes;
	__u64 net_tx_bytes;
	__u64 net_rx_bytes;
	__u64 net_tx_calls;
	__u64 net_rx_calls;
	__u64 blk_read_bytes;
	__u64 blk_write_bytes;
	__u64 dirtied_bytes;
};

/* Per task (thread): the job it belongs to; what the task's own hooks counted (`own`); and the
 * baselines already added to the job, of the kernel's own per-task scheduler counters and of
 * `own` (`seen`). The hooks that run per event (system calls, small reads and writes, sends,
 * receives, bios, dirtied pages) only add to their task's `own`: no lookup of the job's entry per
 * event. The collector's once-a-second task iterator and the task's exit move the deltas to the
 * job (see jobscope.bpf.c). Only the task itself writes `own`; baselines are exchanged
 * atomically. */
struct js_task {
	__u64 job_key;
	__u64 seen_nvcsw;
	__u64 seen_nivcsw;
	__u64 seen_run_ns;
	__u64 seen_run_delay_ns;
	struct js_own own;
	struct js_own seen;
};

/* flags */
#define JS_STATE_SYSCALLS (1ULL << 0) /* the sys_enter program is attached */
#define JS_STATE_SMALL_IO (1ULL << 1) /* small reads and writes are counted */
#define JS_STATE_PAGE_CACHE (1ULL << 2) /* the writeback_dirty_folio program is attached */

struct js_state {
	__u64 abi_version;      /* JS_ABI_VERSION */
	__u64 heartbeat_ns;     /* CLOCK_MONOTONIC of the collector's last beat (every second) */
	__u64 flags;
	__u64 max_jobs;         /* max_entries of the jobs map */
	__u64 dropped_events;   /* accountings (once a second and at exit)
				 * of tagged tasks whose job had no entry
				 * (atomic) */
};

#endif
