#!/bin/bash
# Times the README's demo command on a fresh Debian 12 system of this machine's kind, as a
# newcomer would run it (slurm-conf/lib/fresh-system.sh: a new root filesystem, this machine's
# Rust toolchain and nothing else of it, a clone of this repository's HEAD), then
# `slurm-conf/demo.sh --down` in it, timed: apt, crate downloads, build, cluster, job, report,
# mail, audit and cluster report.
#
#   sudo bench/demo/fresh.sh [WORKDIR]     (default /var/tmp/jobscope-demo-fresh; removed after)
#
# No other jobscope test cluster may be up. Prints the demo's own step times and the total.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
WORK=${1:-/var/tmp/jobscope-demo-fresh}
FRESH_ROOT=$WORK/root
die() { echo "demo-fresh: ERROR: $*" >&2; exit 1; }
. "$REPO/slurm-conf/lib/fresh-system.sh"
! (exec 3<>/dev/tcp/127.0.0.1/6817) 2>/dev/null || die "something listens on 6817: stop the test cluster first (slurm-conf/cluster.sh down)"
trap 'fresh_cleanup; rm -rf "$WORK"' EXIT
fresh_make "$REPO"

echo "demo-fresh: slurm-conf/demo.sh --down in the fresh system (clone of $(git -C "$REPO" rev-parse --short HEAD))"
t0=$(date +%s)
rc=0
fresh_run "$WORK.log" slurm-conf/demo.sh --down || rc=$?
t1=$(date +%s)
grep -E '^==> \[' "$WORK.log" || true
if [ "$rc" != 0 ]; then
  tail -30 "$WORK.log"
  die "the demo failed (exit $rc); its output: $WORK.log"
fi
echo "demo-fresh: the demo took $((t1 - t0)) s on a fresh system ($(nproc) CPUs); its output: $WORK.log"
