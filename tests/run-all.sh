#!/bin/bash
# THE test command (README, CI): everything from a fresh clone, as root, non-interactive.
#
#   sudo tests/run-all.sh [--keep-up] [--skip-deps] [--skip-24.11] [--skip-vm] [--until PHASE]
#
# --until unit|pg|packages|host stops after that phase (unit includes the mutation test; host is
# the 22.05 host's one- and two-node suites): for proofs on a fresh machine (tests/fresh.sh) and for
# developers.
#
# Phases: deps (slurm-conf/install-deps.sh; no apt-get when all is installed) -> fetch (every crate
# of Cargo.lock, for every platform: `cargo metadata` in the tests resolves them all) -> build
# (cargo build --release --workspace) -> unit tests (whole workspace except the cluster tests)
# -> the spool mutation test with overflow checks (dev profile) -> .deb packages (packaging/build-debs.sh,
# lintian), the EL8/EL9 RPMs (packaging/build-rpms.sh) -> install them (slurm-conf/cluster.sh install --packages) -> 1-node cluster + cluster tests (all but
# two_node_*) -> 2-node cluster + two_node_* tests -> 4 private nodes (own mount namespaces) +
# four_node_* tests (transport modes, PostgreSQL) -> the same on SLURM 24.11 (slurm-conf/trixie/: its rootfs,
# the plugin package for 24.11 installed in it; --skip-24.11 leaves it out, for developers) ->
# cgroup v2 in a VM (slurm-conf/vm/): SLURM 24.11 and SLURM 26.05, the core cluster tests against
# the installed packages (--skip-vm leaves them out, for developers) -> cluster down (always,
# unless --keep-up).
# Test phases all run even if an earlier one failed; the exit status is non-zero if any
# phase failed. Uses cargo-nextest when installed, `cargo test` otherwise.
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO" || exit 1
CLUSTER=slurm-conf/cluster.sh
CLUSTER_PKG=jobscope-cluster-tests

keep_up=0 skip_deps=0 skip_2411=${JOBSCOPE_SKIP_2411:-0} skip_vm=${JOBSCOPE_SKIP_VM:-0} until=""
want_until=0
for a in "$@"; do
  if [ "$want_until" = 1 ]; then until=$a; want_until=0; continue; fi
  case "$a" in
    --until) want_until=1 ;;
    --until=*) until=${a#--until=} ;;
    --keep-up) keep_up=1 ;;
    --skip-deps) skip_deps=1 ;;
    --skip-24.11) skip_2411=1 ;;
    --skip-vm) skip_vm=1 ;;
    --with-24.11) ;;  # the default since 24.11 joined the run; accepted for old command lines
    -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run-all: unknown argument $a" >&2; exit 2 ;;
  esac
done
[ "$want_until" = 0 ] || { echo "run-all: --until needs a phase (unit, pg, packages or host)" >&2; exit 2; }
case "$until" in
  ""|unit|pg|packages|host) ;;
  *) echo "run-all: --until $until: not a phase (unit, pg, packages or host)" >&2; exit 2 ;;
esac

[ "$(id -u)" = 0 ] || { echo "run-all: must run as root (it installs packages, starts SLURM, submits jobs via runuser)" >&2; exit 1; }
exec </dev/null
# Everything also goes to a log: CI keeps only the end of a run's output, so when a phase fails
# the summary repeats the log's lines that say what failed (summary below).
RUN_LOG=${JOBSCOPE_RUN_LOG:-/var/tmp/jobscope-run-all.log}
{ : >"$RUN_LOG"; } 2>/dev/null || RUN_LOG=$(mktemp)
exec > >(tee "$RUN_LOG") 2>&1
# The cluster report's browser test fails, rather than skips, without chromium (install-deps
# installs it): CI must run it.
export JOBSCOPE_REQUIRE_CHROMIUM=1
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never} DEBIAN_FRONTEND=noninteractive
# Test failures are anyhow errors with a message: no multi-page backtraces in the log.
export RUST_LIB_BACKTRACE=0
command -v cargo >/dev/null 2>&1 || export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"

T_START=$(date +%s)
declare -a RESULTS=()
FAILED=0
CLUSTER_STARTED=0
CURRENT=""

phase() {
  CURRENT=$1
  PHASE_T0=$(date +%s)
  printf '\n======================================================================\n'
  printf '=== [%s] %s\n' "$(date +%T)" "$1"
  printf '======================================================================\n'
}
# end_phase <rc>: record the result of the current phase
end_phase() {
  local rc=$1 dt=$(( $(date +%s) - PHASE_T0 ))
  if [ "$rc" = 0 ]; then
    RESULTS+=("PASS  ${dt}s  $CURRENT")
  else
    RESULTS+=("FAIL  ${dt}s  $CURRENT (exit $rc)")
    FAILED=1
    echo "run-all: phase FAILED: $CURRENT (exit $rc)" >&2
  fi
  return "$rc"
}
summary() {
  if [ "$FAILED" != 0 ] && [ -s "$RUN_LOG" ]; then
    printf '\n=== what failed: the lines of %s that name a failure (the last 60)\n' "$RUN_LOG"
    grep -aE '^ *(FAIL|SIGSEGV|SIGABRT|TIMEOUT) |phase FAILED|panicked at|ERROR|^Error:|unmet dependencies|^E: |^test .* FAILED' \
      "$RUN_LOG" | tail -n 60
  fi
  printf '\n=== summary (%ss total)\n' "$(( $(date +%s) - T_START ))"
  local r; for r in "${RESULTS[@]}"; do echo "  $r"; done
  if [ "$FAILED" = 0 ]; then echo "=== ALL PASSED"; else echo "=== FAILED"; fi
}
finish() {
  local rc=$?
  trap - EXIT INT TERM
  if [ "${TRIXIE_STARTED:-0}" = 1 ]; then
    phase "24.11 cluster down"
    bash slurm-conf/trixie/cluster.sh down; end_phase $?
  fi
  if [ "$CLUSTER_STARTED" = 1 ] && [ "$keep_up" = 0 ]; then
    phase "cluster down"
    bash "$CLUSTER" down; end_phase $?
  fi
  summary
  [ "$FAILED" = 0 ] && [ "$rc" = 0 ] || exit 1
  exit 0
}
trap finish EXIT
trap 'echo "run-all: interrupted" >&2; FAILED=1; exit 130' INT TERM
# abort <msg>: a phase the later ones depend on failed
abort() { echo "run-all: $1: stopping here" >&2; exit 1; }
# stop_after <phase>: the end of the run when --until names that phase
stop_after() { [ "$until" != "$1" ] || { echo "run-all: --until $1: the later phases left out"; exit 0; }; }

# shellcheck source=tests/cluster/suites.sh
. tests/cluster/suites.sh
if cargo nextest --version >/dev/null 2>&1; then NEXTEST=1; else NEXTEST=0; echo "run-all: cargo-nextest not found, using cargo test"; fi

# run_tests <what>: unit | pg | one-node | two-node | four-node
# With nextest every phase selects the whole workspace and filters by expression: one package
# selection means one feature resolution, so the test binaries are compiled once (in the unit phase)
# and the PostgreSQL and cluster phases reuse them. (`-p <pkg>` resolves features for that package
# alone and recompiled ~90 crates in those two phases.)
run_tests() {
  case "$1:$NEXTEST" in
    unit:1) cargo nextest run --workspace --release --no-tests=warn -E "not package($CLUSTER_PKG)" ;;
    unit:0) cargo test --workspace --exclude "$CLUSTER_PKG" --release ;;
    pg:1) cargo nextest run --workspace --release --run-ignored only -E '(package(jobscope-audit) | package(jobscope-epilog)) and binary(pg)' ;;
    pg:0) cargo test -p jobscope-audit --release --test pg -- --ignored && cargo test -p jobscope-epilog --release --test pg -- --ignored ;;
    one-node:1) cargo nextest run --workspace --release --test-threads 1 -E "package($CLUSTER_PKG) and not test(/(^|::)(two_node|four_node|v2)_/)" ;;
    one-node:0) cargo test -p "$CLUSTER_PKG" --release -- --test-threads 1 --skip two_node_ --skip four_node_ --skip v2_ ;;
    two-node:1) cargo nextest run --workspace --release --test-threads 1 -E "package($CLUSTER_PKG) and test(/(^|::)two_node_/)" ;;
    two-node:0) cargo test -p "$CLUSTER_PKG" --release -- --test-threads 1 two_node_ ;;
    four-node:1) cargo nextest run --workspace --release --test-threads 1 -E "package($CLUSTER_PKG) and test(/(^|::)four_node_/)" ;;
    four-node:0) cargo test -p "$CLUSTER_PKG" --release -- --test-threads 1 four_node_ ;;
  esac
}

if [ "$skip_deps" = 0 ]; then
  phase "deps: slurm-conf/install-deps.sh"
  bash slurm-conf/install-deps.sh; end_phase $? || abort "dependencies missing"
fi

# The fault cases of the cluster tests (inject=, tests/cluster/tests/foundation.rs) need a plugin built
# with the fault-injection feature, which the packaged one must not have: that build comes first,
# with every other crate as in the workspace build (so only the plugin crate is compiled twice), and
# is copied aside as jobscope_spank_faults.so (cluster.sh install puts it beside the packaged one);
# the workspace build after it puts the plugin without the feature back into target/release.
# The build fetches only the host's crates; `cargo metadata` (cli/tests/crate_graph.rs) resolves
# every platform's, and fails offline on a machine that never fetched them. So every crate of the
# lock file is fetched here, by the test command itself, not left to what a machine happens to hold.
phase "fetch: cargo fetch --locked (every crate of Cargo.lock, for every platform)"
cargo fetch --locked; end_phase $? || abort "crates could not be fetched"

phase "build: cargo build --release --workspace (first with jobscope-plugin/fault-injection, kept as jobscope_spank_faults.so)"
REL=${CARGO_TARGET_DIR:-$REPO/target}/release
cargo build --release --workspace --features jobscope-plugin/fault-injection \
  && cp "$REL/libjobscope_spank.so" "$REL/jobscope_spank_faults.so" \
  && cargo build --release --workspace; end_phase $? || abort "build failed"

phase "unit tests (workspace except $CLUSTER_PKG)"
run_tests unit; end_phase $?

# The release profile wraps on integer overflow; the dev profile panics. The mutation test exists to
# find arithmetic that corrupt spools can overflow, so it also runs where overflow panics.
phase "mutation test with overflow checks (dev profile)"
cargo test -p jobscope-report --test mutation; end_phase $?
stop_after unit

# A real PostgreSQL (Debian's package) on 127.0.0.1:15432, started and stopped by the project's
# script (the outage test runs a second one on 15433 itself): the sink, resume after an outage,
# row-level security with real roles, the SQL engine equal to the Parquet engine; the transport
# of node summaries (epilog/tests/pg.rs: the node role's real login, the collector's one report
# per job, 200 Epilogs through 10 connections, an outage; servers of its own on 15434/15435). ~60 s.
phase "PostgreSQL tests (slurm-conf/postgres.sh; audit/tests/pg.rs and epilog/tests/pg.rs --ignored)"
if bash slurm-conf/postgres.sh up; then
  run_tests pg; pg_rc=$?
  bash slurm-conf/postgres.sh down || pg_rc=1
  end_phase $pg_rc
else
  end_phase 1
fi
stop_after pg

# The .deb packages are built from the release build (lintian must report no error) and installed
# with apt; the cluster tests then run the packaged files (cluster.sh install --packages). If the
# packages cannot be built, that phase fails and the cluster tests run on the build's files.
# The test builds above made target/release/jobscope-kernel with its test-only `bench` feature
# (kernel/Cargo.toml; build-debs.sh refuses such a collector): the workspace build puts the one
# without it back (nothing is compiled again, both builds are kept).
phase "build: cargo build --release --workspace (the collector without its bench feature)"
cargo build --release --workspace; end_phase $? || abort "build failed"

phase "packages: packaging/build-debs.sh --no-build (lintian), apt install"
bash packaging/build-debs.sh --no-build; pkg_rc=$?; end_phase $pkg_rc
if [ "$pkg_rc" = 0 ]; then
  phase "install: $CLUSTER install --packages (the installed .debs)"
  bash "$CLUSTER" install --packages "${CARGO_TARGET_DIR:-$REPO/target}/debian"; end_phase $? || abort "install failed"
  phase "packages: packaging/test-packages.sh (files, man pages, completions, postinst)"
  bash packaging/test-packages.sh; end_phase $?
  phase "packages: packaging/build-rpms.sh --srpm (EL8/EL9 RPMs: binaries linked for glibc 2.28, rpmlint, files, dependencies, the binaries' GLIBC needs, scriptlets in a throw-away root; the source RPM)"
  bash packaging/build-rpms.sh --srpm; end_phase $?
else
  phase "install: $CLUSTER install (from the build)"
  bash "$CLUSTER" install; end_phase $? || abort "install failed"
fi

stop_after packages

phase "cluster up (1 node)"
CLUSTER_STARTED=1
if bash "$CLUSTER" up; end_phase $?; then
  phase "cluster tests, 1 node (all but two_node_*)"
  run_tests one-node; end_phase $?
fi

phase "cluster up --nodes 2"
if bash "$CLUSTER" up --nodes 2; end_phase $?; then
  phase "cluster tests, 2 nodes (two_node_*)"
  run_tests two-node; end_phase $?
fi

# A cluster, not one host (docs/cluster.md): four slurmd, each in its own mount namespace with
# private jobscope directories, the host's namespace the service host running the collector,
# against the real PostgreSQL of slurm-conf/postgres.sh (the tests start it; it is stopped after).
phase "cluster up --nodes 4 (private nodes)"
if bash "$CLUSTER" up --nodes 4; end_phase $?; then
  phase "cluster tests, 4 private nodes (four_node_*: transport modes, PostgreSQL)"
  run_tests four-node; fn_rc=$?
  bash slurm-conf/postgres.sh down || fn_rc=1
  end_phase $fn_rc
fi
stop_after host

# SLURM 24.11 (issue 11 §1): the same cluster tests against the daemons of a Debian 13 root
# filesystem (slurm-conf/trixie/: built once per machine and cached), with the plugin built against
# its headers, in place of the 22.05 daemons. docs/slurm-versions.md.
# Part of the default run; --skip-24.11 (or JOBSCOPE_SKIP_2411=1) leaves it out. The rootfs is
# built once per machine (~100 s from an empty cache, docs/slurm-versions.md). As for 22.05, the
# suite runs the packaged files when the packages could be built: the jobscope .deb above and the
# plugin's for 24.11 (packaging/build-debs.sh --slurm 24.11, lintian), installed with apt inside the
# rootfs ($TRIXIE/cluster.sh install --packages).
TRIXIE=slurm-conf/trixie
if [ "$skip_2411" = 1 ]; then echo "run-all: --skip-24.11: SLURM 24.11 on the host left out"; else
phase "24.11: rootfs ($TRIXIE/rootfs.sh build, cached)"
bash "$TRIXIE/rootfs.sh" build; end_phase $? || abort "no 24.11 rootfs"
if [ "$pkg_rc" = 0 ]; then
  phase "24.11: plugin package (packaging/build-debs.sh --slurm 24.11: its headers, lintian), apt install in the rootfs"
  bash packaging/build-debs.sh --slurm 24.11 && bash "$TRIXIE/cluster.sh" down >/dev/null \
    && bash "$TRIXIE/cluster.sh" install --packages "${CARGO_TARGET_DIR:-$REPO/target}/debian" \
      "${JOBSCOPE_TARGET_24_11:-$REPO/target/slurm-24.11}/debian"
else
  phase "24.11: build against its headers ($TRIXIE/cluster.sh build), install into the rootfs"
  bash "$TRIXIE/cluster.sh" build && bash "$TRIXIE/cluster.sh" install
fi
if end_phase $?; then
  bash "$CLUSTER" down >/dev/null
  TRIXIE_STARTED=1
  phase "24.11 cluster up (1 node)"
  if bash "$TRIXIE/cluster.sh" up; end_phase $?; then
    # the 24.11 set of tests/cluster/suites.sh (22.05 above ran them all)
    phase "24.11 cluster tests, 1 node (HOST_2411 of tests/cluster/suites.sh)"
    if [ "$NEXTEST" = 1 ]; then
      JOBSCOPE_SLURM=24.11 cargo nextest run --workspace --release --test-threads 1 -E "$(suite_filter "$HOST_2411")"
    else
      JOBSCOPE_SLURM=24.11 run_tests one-node
    fi; end_phase $?
  fi
  phase "24.11 cluster up --nodes 2"
  if bash "$TRIXIE/cluster.sh" up --nodes 2; end_phase $?; then
    phase "24.11 cluster tests, 2 nodes (two_node_*)"
    JOBSCOPE_SLURM=24.11 run_tests two-node; end_phase $?
  fi
  phase "24.11 cluster down"
  bash "$TRIXIE/cluster.sh" down; end_phase $?
  TRIXIE_STARTED=0
fi
fi

# cgroup v2 under real SLURM, and SLURM 26.05 (issue 20): a qemu VM per release (slurm-conf/vm/: the
# image built once per machine from Debian's packages and cached, booted with cgroup v2 only and no
# network), the packages installed with apt in the guest, and the core set of cluster tests
# (slurm-conf/vm/run-suite.sh's CORE; README "Supported configurations"). 24.11 runs with SLURM's
# default controllers (no io: I/O per process); 26.05 with its default job directory names (the
# SLUID) and EnableExtraControllers=io,pids (I/O from io.stat).
[ "$skip_vm" = 1 ] && { echo "run-all: --skip-vm: the cgroup v2 VM suites left out"; exit 0; }
VM=slurm-conf/vm
phase "VM images ($VM/image.sh build trixie sid, cached)"
bash "$VM/image.sh" build trixie && bash "$VM/image.sh" build sid; end_phase $? || abort "no VM image"
if [ "$pkg_rc" = 0 ]; then
  # (the 24.11 plugin package comes from the 24.11 phases above; built here when they were skipped)
  phase "24.11 on cgroup v2 (VM): core cluster tests against the installed packages"
  { ls "${JOBSCOPE_TARGET_24_11:-$REPO/target/slurm-24.11}"/debian/jobscope-spank-slurm24.11_*.deb >/dev/null 2>&1 \
      || { bash "$TRIXIE/rootfs.sh" build && bash packaging/build-debs.sh --slurm 24.11; }; } \
    && bash "$VM/run-suite.sh" trixie; end_phase $?
  phase "26.05: plugin package (packaging/build-debs.sh --slurm 26.05: its headers, lintian)"
  if bash packaging/build-debs.sh --slurm 26.05; end_phase $?; then
    phase "26.05 on cgroup v2 (VM, SLUID job directories, io.stat): core cluster tests against the installed packages"
    bash "$VM/run-suite.sh" sid --cgroup-conf EnableExtraControllers=io,pids; end_phase $?
  fi
else
  phase "VM suites: need the packages, which could not be built"
  end_phase 1
fi

exit 0
