#!/bin/bash
# Runs the real-cluster suite against SLURM 24.11 while holding the cluster tests' lock for the
# whole run (other engineers' tests wait meanwhile, instead of running on 24.11 daemons):
#   slurm-conf/trixie/run-suite.sh [1|2] [nextest filter args…]
# 1 (default): the 1-node cluster and all but two_node_*; 2: the 2-node cluster and two_node_*.
# Stops the 22.05 daemons first and brings them back (in the mode they ran in) at the end.
# tests/run-all.sh has its own 24.11 phases (it runs alone and takes no lock).
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
cd "$REPO" || exit 1
NODES=${1:-1}; shift || true
LOCK=/tmp/jobscope-cluster-tests.lock
exec 9>>"$LOCK"
echo "run-suite-24.11: waiting for $LOCK"
flock -w 1800 9 || { echo "run-suite-24.11: lock not free after 30 min" >&2; exit 1; }
echo "pid $$ slurm-conf/trixie/run-suite.sh $NODES" >"$LOCK"
was=$(cat /run/jobscope-test-cluster/mode 2>/dev/null || true)
bash slurm-conf/cluster.sh down 9>&-
rc=0
if bash "$HERE/cluster.sh" up --nodes "$NODES" 9>&-; then
  if [ "$NODES" = 2 ]; then filter='test(/(^|::)two_node_/)'; else filter='not test(/(^|::)(two_node|v2)_/)'; fi
  t0=$(date +%s)
  JOBSCOPE_SLURM=24.11 JOBSCOPE_CLUSTER_LOCK_FD=9 cargo nextest run -p jobscope-cluster-tests --release \
    --test-threads 1 --no-fail-fast -E "$filter" "$@"
  rc=$?
  echo "run-suite-24.11: suite exit $rc in $(( $(date +%s) - t0 )) s"
else
  rc=1
fi
bash "$HERE/cluster.sh" down 9>&-
if [ -n "$was" ]; then bash slurm-conf/cluster.sh up --nodes "$was" 9>&-; fi
exit $rc
