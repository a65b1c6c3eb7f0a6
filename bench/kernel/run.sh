#!/bin/sh
# jobscope kernel collector benchmark: what the BPF programs cost, all figures from ONE run,
# configurations interleaved round by round, medians reported side by side.
#
#   sudo bench/kernel/run.sh [--rounds N] [--calls N] [--round-trips N] [--tcp-mib N]
#                            [--dd-count N] [--dd-dir DIR]
#
# Needs root and a kernel with BTF (/sys/kernel/btf/vmlinux). Self-contained: it builds
# jobscope-kernel (release) with the `bench` feature, which the packaged collector lacks, keeps
# that build aside as jobscope-kernel-bench and puts the build without it back (as
# tests/run-all.sh does with the plugin's fault-injection build); `jobscope-kernel bench` loads its
# own collector (pins under /sys/fs/bpf/jobscope-bench-<pid>, removed at the end), tags its own
# workloads and prints:
#   1. ns per getppid() system call in a tagged process with (a) nothing on tp_btf/sys_enter,
#      (b) an empty program there (the floor), (c) our program, and (d) our program in an
#      untagged process (what every other process on the host pays); added ns over (a) and
#      the ratio (c-a)/(b-a) (target <= 1.5).
#   2. CPU time (user+sys, getrusage) of a pipe ping-pong (200k round trips), a 1 GiB
#      loopback TCP transfer and dd bs=512 to a file on /var/tmp, in a tagged process, with no
#      program, with none again (A/A: the difference is the noise), with what
#      `jobscope-kernel run` attaches by default, with --page-cache too and (where the kernel
#      refuses fentry) with the small I/O program on sys_enter too: added CPU % against the
#      first (target < 1 % for the default), timed with kernel.bpf_stats_enabled=0; and, where
#      it is 1 (sysctl -w kernel.bpf_stats_enabled=1; set it back to 0 after), each program's
#      runs and run time during each workload (3 rounds of their own, with --page-cache),
#      against the workload's CPU time, also less an empty program's run time.
# Takes about five minutes with the defaults (7 rounds). Run it on an otherwise idle machine.
set -eu
cd "$(dirname "$0")/../.."
REL=${CARGO_TARGET_DIR:-target}/release
cargo build --release -q -p jobscope-kernel --features bench
cp "$REL/jobscope-kernel" "$REL/jobscope-kernel-bench"
cargo build --release -q -p jobscope-kernel
exec "$REL/jobscope-kernel-bench" bench "$@"
