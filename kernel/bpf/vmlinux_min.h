/* A minimal, hand-written stand-in for a full `bpftool btf dump ... format c` vmlinux.h: only the
 * types and the fields jobscope.bpf.c reads. Every kernel struct carries preserve_access_index,
 * so clang emits CO-RE relocations and libbpf fixes each field offset up against the running
 * kernel's BTF at load time: the layouts below need not match any kernel, only the names do
 * (struct, field and enum names are what CO-RE matches on).
 *
 * UAPI constants (map types, flags) are ABI-stable and copied by value.
 */
#ifndef JOBSCOPE_VMLINUX_MIN_H
#define JOBSCOPE_VMLINUX_MIN_H

typedef signed char __s8;
typedef unsigned char __u8;
typedef short __s16;
typedef unsigned short __u16;
typedef int __s32;
typedef unsigned int __u32;
typedef long long __s64;
typedef unsigned long long __u64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef __u64 u64;
typedef __u32 u32;
typedef _Bool bool;
enum { false = 0, true = 1 };
typedef unsigned long size_t;
typedef long long loff_t;

/* include/uapi/linux/bpf.h */
enum bpf_map_type {
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_HASH = 5,
	BPF_MAP_TYPE_TASK_STORAGE = 29,
};
enum {
	BPF_F_NO_PREALLOC = (1U << 0),
	BPF_F_MMAPABLE = (1U << 10),
};
enum {
	BPF_LOCAL_STORAGE_GET_F_CREATE = (1ULL << 0),
};

#define AF_INET 2
#define AF_INET6 10
#define MSG_PEEK 2

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)

struct sched_entity {
	u64 sum_exec_runtime;
};

struct sched_info {
	unsigned long long run_delay;
};

struct bpf_local_storage;

struct task_struct {
	struct bpf_local_storage *bpf_storage; /* NULL while no BPF program gave the task storage */
	unsigned long nvcsw;
	unsigned long nivcsw;
	struct sched_entity se;
	struct sched_info sched_info;
};

struct bpf_iter_meta {
	void *seq;
};

/* the context of an iter/task program (kernel/bpf/task_iter.c) */
struct bpf_iter__task {
	union {
		struct bpf_iter_meta *meta;
	};
	union {
		struct task_struct *task;
	};
};

struct sock_common {
	unsigned short skc_family;
};

struct sock {
	struct sock_common __sk_common;
};

struct bvec_iter {
	unsigned int bi_size;
};

struct bio {
	__u32 bi_opf;
	struct bvec_iter bi_iter;
};

/* The folio's first word is its flags: `unsigned long flags` up to 6.17, `memdesc_flags_t flags`
 * (a struct holding `unsigned long f`) from 6.18. Both shapes are declared as flavors (libbpf
 * ignores the ___suffix when matching names) and the program reads the one the running kernel
 * has, as a plain load from the tracepoint's folio pointer, no helper call. `_flags_1` is the
 * first tail page's flags, whose low byte is the folio order of a large folio
 * (include/linux/mm.h). */
struct folio {
	unsigned long _flags_1;
};

struct folio___flags_word {
	unsigned long flags;
};

struct folio___flags_memdesc {
	struct {
		unsigned long f;
	} flags;
};

/* The system call argument registers (read by jobscope.bpf.c's JS_SYSCALL_ARG3). */
#if defined(__TARGET_ARCH_x86)
struct pt_regs {
	unsigned long di;
	unsigned long si;
	unsigned long dx;
	unsigned long r10;
	unsigned long r8;
	unsigned long r9;
};
#elif defined(__TARGET_ARCH_arm64)
struct pt_regs {
	__u64 regs[31];
};
#else
struct pt_regs {
	unsigned long unused;
};
#endif

struct file {
	unsigned int f_flags;
};

struct address_space {
	unsigned long nrpages;
};

#pragma clang attribute pop

/* include/linux/page-flags.h: its value is relocated by name (bpf_core_enum_value). */
enum pageflags {
	PG_head = 6,
};

#endif
