#!/bin/bash
# The test command on a fresh Debian 12 system of this machine's kind, as on a machine that never
# ran the project (slurm-conf/lib/fresh-system.sh: a new root filesystem, this machine's Rust
# toolchain and nothing else of it: no crates downloaded, no apt packages, no build, no cached
# images), then `tests/run-all.sh --until PHASE` in a clone of this repository's HEAD, timed:
# whatever a test needs must be fetched or installed by the project's own scripts, or this fails.
#
#   sudo tests/fresh.sh [--until unit|pg|packages] [WORKDIR]
#                         (default: --until unit, /var/tmp/jobscope-tests-fresh; removed after)
#
# The cluster phases would start SLURM on this host's loopback, so they are not offered: the
# phases up to the packages start no cluster, and may run beside one. Prints the run's summary.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
until=unit WORK=/var/tmp/jobscope-tests-fresh
while [ $# -gt 0 ]; do
  case "$1" in
    --until) until=${2:?--until needs a phase}; shift 2 ;;
    --until=*) until=${1#--until=}; shift ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "tests-fresh: unknown option $1" >&2; exit 2 ;;
    *) WORK=$1; shift ;;
  esac
done
case "$until" in unit|pg|packages) ;; *) echo "tests-fresh: --until $until: unit, pg or packages" >&2; exit 2 ;; esac
FRESH_ROOT=$WORK/root
die() { echo "tests-fresh: ERROR: $*" >&2; exit 1; }
. "$REPO/slurm-conf/lib/fresh-system.sh"
trap 'fresh_cleanup; rm -rf "$WORK"' EXIT
fresh_make "$REPO"

echo "tests-fresh: tests/run-all.sh --until $until in the fresh system (clone of $(git -C "$REPO" rev-parse --short HEAD))"
t0=$(date +%s)
rc=0
fresh_run "$WORK.log" tests/run-all.sh --until "$until" || rc=$?
t1=$(date +%s)
sed -n '/^=== summary/,$p' "$WORK.log"
[ "$rc" = 0 ] || die "the test command failed on a fresh system (exit $rc); its output: $WORK.log"
echo "tests-fresh: the test command up to '$until' took $((t1 - t0)) s on a fresh system ($(nproc) CPUs); its output: $WORK.log"
