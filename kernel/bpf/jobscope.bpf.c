// SPDX-License-Identifier: GPL-2.0
/* jobscope's kernel-side counters, per SLURM job (see jobscope_abi.h for the contract).
 *
 * Tasks are tagged, not cgroups: user space puts a struct js_task into the task-local storage
 * `tasks` of a job's first task (through a pidfd); sched_process_fork copies the tag to every
 * child and thread. Each hook starts with the same fast path, tag_of(task): a task without any
 * BPF task storage (every other task on the host) costs one pointer test; a tagged task one
 * task-storage lookup.
 *
 * The programs never create `jobs` entries (user space does, before tagging, and deletes them):
 * a tagged task whose job has no entry only bumps state.dropped_events.
 *
 * Concurrency: the per-event hooks add to their own task's js_task fields only, which no other
 * context writes (the comment above js_sys_enter says why). A job's counters (this CPU's copy of the PERCPU_HASH
 * value) are written only by account(), from the task iterator (js_catch_up, preemptible) and
 * at a task's exit, so it adds atomically (a lock-prefixed add on a CPU-local cache line): one
 * may preempt or interleave with the other on the same CPU.
 *
 * The license must be GPL: bpf_task_storage_get and tp_btf/fentry attachment are GPL-only.
 */
#include "vmlinux_min.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "jobscope_abi.h"

char LICENSE[] SEC("license") = "GPL";

/* Set by the collector before load (sysconf(_SC_PAGESIZE)): a folio of order n is
 * page_size << n bytes. */
const volatile __u64 page_size = 4096;

/* Small reads and writes are counted at vfs_read/vfs_write (fentry) where the kernel allows
 * fentry. Where it does not (fentry needs ftrace direct calls; some kernels refuse it with
 * EPERM), the collector loads without the fentry programs and sets small_io_from_syscalls:
 * then the read/pread64 and write/pwrite64 system calls — the user-space callers of
 * vfs_read/vfs_write — are counted by their count argument at sys_enter instead. The numbers
 * are the build architecture's, set by the collector. */
const volatile bool small_io_from_syscalls = false;
const volatile long nr_read = -1, nr_pread64 = -1, nr_write = -1, nr_pwrite64 = -1;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	/* Not preallocated: an entry is one js_counters per possible CPU, and 4096 of them on a
	 * 256-CPU node would be 160 MB charged to the collector whether or not jobs run. Only user
	 * space adds entries, so no program ever allocates. */
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 4096); /* the collector sets --max-jobs before load */
	__type(key, __u64);
	__type(value, struct js_counters);
} jobs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* required for local storage maps */
	__type(key, int);
	__type(value, struct js_task);
} tasks SEC(".maps");

/* MMAPABLE so that the collector can store heartbeat_ns with one plain 8-byte write into the
 * mapped value, never rewriting the whole value over a concurrent atomic add to dropped_events
 * (a BPF_MAP_UPDATE_ELEM copies all 40 bytes). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct js_state);
} state SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, JS_MAX_SYSCALLS);
	__type(key, __u32);
	__type(value, __u32);
} sysclass SEC(".maps");

static __always_inline void count_dropped(void)
{
	__u32 zero = 0;
	struct js_state *s = bpf_map_lookup_elem(&state, &zero);

	if (s)
		__sync_fetch_and_add(&s->dropped_events, 1);
}

/* This CPU's counters of t's job, or NULL (and one dropped event) if the job has no entry. */
static __always_inline struct js_counters *job_of(struct js_task *t)
{
	__u64 key = t->job_key;
	struct js_counters *c = bpf_map_lookup_elem(&jobs, &key);

	if (!c)
		count_dropped();
	return c;
}

/* Moves *seen to now atomically and returns how far it moved. js_catch_up and js_exit may
 * account the same task at once (an iteration meeting a task in do_exit on another CPU): with
 * an exchange, whatever the order, the deltas added sum to the last value minus the first
 * (modulo 2^64: a racer that read an older value adds a "negative" delta that the other's
 * larger one has already covered), so nothing is counted twice or lost. */
static __always_inline __u64 advance(__u64 *seen, __u64 now)
{
	return now - __sync_lock_test_and_set(seen, now);
}

/* Adds what the kernel counted for task p since the last call (the baselines in t) to p's job:
 * the sums over a job's tasks then equal the kernel's own per-task counters. Atomic adds:
 * js_catch_up runs preemptible (migration disabled), so a tracepoint program of the same job
 * may run on this CPU in the middle of its read-modify-write. */
static __always_inline void account(struct js_task *t, struct task_struct *p)
{
	struct js_counters *c = job_of(t);

	if (!c)
		return;
	__sync_fetch_and_add(&c->ctx_voluntary, advance(&t->seen_nvcsw, p->nvcsw));
	__sync_fetch_and_add(&c->ctx_involuntary, advance(&t->seen_nivcsw, p->nivcsw));
	__sync_fetch_and_add(&c->run_ns, advance(&t->seen_run_ns, p->se.sum_exec_runtime));
	__sync_fetch_and_add(&c->runq_wait_ns,
			     advance(&t->seen_run_delay_ns, p->sched_info.run_delay));
	/* what the task's own hooks counted (a plain 8-byte load: only the task writes these) */
#define JS_MOVE(f) __sync_fetch_and_add(&c->f, advance(&t->seen.f, t->own.f))
	for (int i = 0; i < JS_SYS_NCLASS; i++)
		JS_MOVE(syscalls[i]);
	JS_MOVE(small_reads);
	JS_MOVE(small_writes);
	JS_MOVE(net_tx_bytes);
	JS_MOVE(net_rx_bytes);
	JS_MOVE(net_tx_calls);
	JS_MOVE(net_rx_calls);
	JS_MOVE(blk_read_bytes);
	JS_MOVE(blk_write_bytes);
	JS_MOVE(dirtied_bytes);
#undef JS_MOVE
}

/* Task p's tag, or NULL. Most tasks on a node have no BPF task storage at all: for them the
 * pointer test settles it without the helper call. This is the fast path every other process
 * pays, once per send, receive, bio or dirtied page. */
static __always_inline struct js_task *tag_of(struct task_struct *p)
{
	if (bpf_core_field_exists(p->bpf_storage) && !p->bpf_storage)
		return 0;
	return bpf_task_storage_get(&tasks, p, 0, 0);
}

static __always_inline struct js_task *current_tag(void)
{
	return tag_of(bpf_get_current_task_btf());
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(js_fork, struct task_struct *parent, struct task_struct *child)
{
	struct js_task *t = tag_of(parent);
	if (!t)
		return 0;
	/* The tracepoint fires after copy_process and before the child is first woken: its
	 * nvcsw, nivcsw, sum_exec_runtime and run_delay are all still 0, so zero baselines. */
	struct js_task init = { .job_key = t->job_key };

	bpf_task_storage_get(&tasks, child, &init, BPF_LOCAL_STORAGE_GET_F_CREATE);
	return 0;
}

/* The scheduler's counters are not followed switch by switch: a program on sched_switch
 * costs every context switch on the node (+7 % CPU on a pipe ping-pong, docs/kernel.md).
 * The kernel keeps them per task anyway, so they are collected instead
 *   - by this iterator, which the collector runs once a second over every task on the node
 *     (only tagged tasks do more than one lookup): a job's figures are at most 1 s old;
 *   - at each task's exit (js_exit), so that nothing a task did is lost when it goes, and a
 *     job's totals after its last task has exited are exact. */
SEC("iter/task")
int js_catch_up(struct bpf_iter__task *ctx)
{
	struct task_struct *p = ctx->task;
	struct js_task *t;

	if (!p)
		return 0;
	t = tag_of(p);
	if (t)
		account(t, p);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(js_exit, struct task_struct *p)
{
	struct js_task *t = tag_of(p);
	if (!t)
		return 0;
	/* everything up to now; only the dead task's own final switch-out comes after this */
	account(t, p);
	return 0;
}

/* The third system call argument in the user registers sys_enter gets (the kernel's own
 * pt_regs field names, see vmlinux_min.h): a plain load from the tracepoint's pointer. */
#if defined(__TARGET_ARCH_x86)
#define JS_SYSCALL_ARG3(regs) ((__u64)(regs)->dx)
#elif defined(__TARGET_ARCH_arm64)
#define JS_SYSCALL_ARG3(regs) ((__u64)(regs)->regs[2])
#endif

/* The sys_enter half of small I/O counting where fentry is unavailable (see above). */
static __always_inline void small_io_at_syscall(struct js_task *t, struct pt_regs *regs, long id)
{
#if defined(__TARGET_ARCH_x86) || defined(__TARGET_ARCH_arm64)
	bool rd = id == nr_read || id == nr_pread64;

	if (!rd && id != nr_write && id != nr_pwrite64)
		return;
	/* the count argument of all four: read(fd, buf, count), pread64(fd, buf, count, pos) */
	if (JS_SYSCALL_ARG3(regs) >= JS_SMALL_IO_BYTES)
		return;
	if (rd)
		t->own.small_reads++;
	else
		t->own.small_writes++;
#endif
}

/* Every hook below runs in its task's own context and adds to that task's own fields only (no
 * lookup of the job's entry per event); account() moves them to the job. Only the task writes
 * its own fields: tp_btf programs are not preemptible and a program does not nest on one CPU;
 * fentry programs are preemptible, but what runs meanwhile is another task, with its own
 * fields. So plain additions, no atomics. */
SEC("tp_btf/sys_enter")
int BPF_PROG(js_sys_enter, struct pt_regs *regs, long id)
{
	struct js_task *t = current_tag();
	if (!t)
		return 0;
	__u32 cls = JS_SYS_OTHER;

	if (id >= 0 && id < JS_MAX_SYSCALLS) {
		__u32 nr = id;
		__u32 *v = bpf_map_lookup_elem(&sysclass, &nr);

		if (v && *v < JS_SYS_NCLASS)
			cls = *v;
	}
	t->own.syscalls[cls]++;
	if (small_io_from_syscalls)
		small_io_at_syscall(t, regs, id);
	return 0;
}

/* Small I/O counting alone on sys_enter: loaded in place of js_sys_enter where fentry is
 * unavailable and system calls are not counted (no --syscalls). */
SEC("tp_btf/sys_enter")
int BPF_PROG(js_sys_enter_io, struct pt_regs *regs, long id)
{
	struct js_task *t = current_tag();
	if (!t)
		return 0;
	small_io_at_syscall(t, regs, id);
	return 0;
}

/* The floor of the benchmark: the same attach point, no work. Not attached by the collector. */
SEC("tp_btf/sys_enter")
int BPF_PROG(js_sys_enter_empty)
{
	return 0;
}

SEC("fentry/vfs_read")
int BPF_PROG(js_vfs_read, struct file *file, char *buf, size_t count, loff_t *pos)
{
	struct js_task *t = current_tag();
	if (!t)
		return 0;
	if (count < JS_SMALL_IO_BYTES)
		t->own.small_reads++;
	return 0;
}

SEC("fentry/vfs_write")
int BPF_PROG(js_vfs_write, struct file *file, const char *buf, size_t count, loff_t *pos)
{
	struct js_task *t = current_tag();
	if (!t)
		return 0;
	if (count < JS_SMALL_IO_BYTES)
		t->own.small_writes++;
	return 0;
}

static __always_inline bool is_inet(struct sock *sk)
{
	unsigned short family;

	if (!sk)
		return false;
	family = sk->__sk_common.skc_family;
	return family == AF_INET || family == AF_INET6;
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(js_sock_send, struct sock *sk, int ret, int flags)
{
	struct js_task *t = current_tag();
	if (!t)
		return 0;
	if (ret <= 0 || !is_inet(sk))
		return 0;
	t->own.net_tx_bytes += ret;
	t->own.net_tx_calls++;
	return 0;
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(js_sock_recv, struct sock *sk, int ret, int flags)
{
	struct js_task *t = current_tag();
	if (!t)
		return 0;
	/* A MSG_PEEK receive leaves the bytes queued: they are counted when really read. */
	if (ret <= 0 || (flags & MSG_PEEK) || !is_inet(sk))
		return 0;
	t->own.net_rx_bytes += ret;
	t->own.net_rx_calls++;
	return 0;
}

/* req_op(): the low REQ_OP_BITS (8 in 6.x) of bi_opf */
#define JS_REQ_OP_MASK 0xff
#define JS_REQ_OP_READ 0
#define JS_REQ_OP_WRITE 1

SEC("tp_btf/block_bio_queue")
int BPF_PROG(js_bio_queue, struct bio *bio)
{
	struct js_task *t = current_tag();
	if (!t)
		return 0;
	/* Traced once per bio (BIO_TRACE_COMPLETION), before any split: the full size, once. */
	__u32 op = bio->bi_opf & JS_REQ_OP_MASK;
	__u64 bytes = bio->bi_iter.bi_size;

	if (op == JS_REQ_OP_WRITE)
		t->own.blk_write_bytes += bytes;
	else if (op == JS_REQ_OP_READ)
		t->own.blk_read_bytes += bytes;
	return 0;
}

/* Bytes of a folio: page_size << order. folio_test_large() is PG_head in the first word, and a
 * large folio's order is the low byte of _flags_1 (include/linux/mm.h folio_large_order). The
 * fields and the PG_head bit are relocated by CO-RE, and read with plain loads from the
 * tracepoint's trusted pointer (no bpf_probe_read_kernel call per dirtied page); where neither
 * shape of the flags word or no _flags_1 exists (kernels before folios), every folio is one
 * page. */
static __always_inline __u64 folio_bytes(struct folio *folio)
{
	unsigned long flags;
	__u32 head_bit = bpf_core_enum_value(enum pageflags, PG_head);

	if (bpf_core_field_exists(((struct folio___flags_memdesc *)folio)->flags.f))
		flags = ((struct folio___flags_memdesc *)folio)->flags.f;
	else if (bpf_core_field_exists(((struct folio___flags_word *)folio)->flags))
		flags = ((struct folio___flags_word *)folio)->flags;
	else
		return page_size;
	if (!bpf_core_field_exists(folio->_flags_1) || !(flags & (1UL << (head_bit & 63))))
		return page_size;
	return page_size << (folio->_flags_1 & 0xff);
}

SEC("tp_btf/writeback_dirty_folio")
int BPF_PROG(js_dirty_folio, struct folio *folio, struct address_space *mapping)
{
	struct js_task *t = current_tag();
	if (!t)
		return 0;
	/* Fired by folio_account_dirtied when a clean folio turns dirty, in the writer's context. */
	t->own.dirtied_bytes += folio_bytes(folio);
	return 0;
}
