#!/bin/bash
# What the Epilog's question to slurmctld costs, old and new, with many jobs in the controller.
#
#   bench/epilog-query.sh [--jobs N] [--rounds R] [--no-wait]      (as root, test cluster up)
#
# The Epilog asks about the job that ended. Before: `squeue --json -t all -j ID` (SLURM 22.05's
# JSON output ignores -j and -t and lists EVERY job slurmctld holds) followed by
# `scontrol show job -o ID` (mail settings and how the run ended). After: one
# `scontrol show job -o ID` (report/src/slurm/v22_05.rs). An array job's digest asks
# `squeue -h -r -t all -j ARRAY -o %A|%F|%K|%T` (no free text) instead of squeue --json.
#
# It measures each query R times (default 15, interleaved) with the controller holding only the
# jobs it holds now, then again after submitting N (default 5000) held jobs as alice, and prints
# the median and p90 wall time and the bytes each query returns. The held jobs are cancelled at
# the end; cancelled jobs stay in slurmctld for MinJobAge (300 s on the test cluster), and
# without --no-wait the script waits until they are gone, so later tests see a normal controller.
# It holds the cluster tests' lock (tests/cluster/src/lib.rs: LOCK_FILE) throughout.
set -euo pipefail
jobs=5000 rounds=15 wait_purge=1
while [ $# -gt 0 ]; do
  case "$1" in
    --jobs) jobs=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --no-wait) wait_purge=0; shift ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "epilog-query: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "epilog-query: run as root" >&2; exit 1; }
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
scontrol ping 2>/dev/null | grep -q UP || { echo "epilog-query: the test cluster is not up (slurm-conf/cluster.sh up)" >&2; exit 1; }

LOCK=/tmp/jobscope-cluster-tests.lock
exec 9>>"$LOCK"
echo "epilog-query: waiting for the cluster lock $LOCK"
flock -w 900 9 || { echo "epilog-query: cluster lock busy for 900 s" >&2; exit 1; }

WORK=$(mktemp -d /tmp/jobscope-epilog-query.XXXXXX)
chmod 0755 "$WORK"
IDS=$WORK/held-ids
: >"$IDS"
cleanup() {
  if [ -s "$IDS" ]; then
    echo "epilog-query: cancelling $(wc -l <"$IDS") held jobs"
    xargs -n 500 scancel <"$IDS" || true
  fi
}
trap cleanup EXIT

# The job asked about: a short job that has ended, as during its Epilog.
target=$(cd "$WORK" && runuser -u alice -- sbatch --parsable -J epilog-query-target -o /dev/null --wrap true)
for _ in $(seq 1 300); do
  st=$(squeue -h -j "$target" -t all -o %T 2>/dev/null || true)
  [ "$st" = COMPLETED ] && break
  sleep 0.2
done
[ "$st" = COMPLETED ] || { echo "epilog-query: job $target did not complete ($st)" >&2; exit 1; }

old_squeue() { squeue --json -t all -j "$target"; }
old_scontrol() { scontrol show job -o "$target"; }
new_scontrol() { SLURM_TIME_FORMAT=%s scontrol show job -o "$target"; }
new_array() { squeue -h -r -t all -j "$target" -o '%A|%F|%K|%T'; }

# measure <label>: R interleaved rounds of every query; prints one line per query.
measure() {
  local label=$1 q r t0 t1
  local -A times=() bytes=()
  for r in $(seq 1 "$rounds"); do
    for q in old_squeue old_scontrol new_scontrol new_array; do
      t0=$(date +%s%N)
      "$q" >"$WORK/out" 2>/dev/null
      t1=$(date +%s%N)
      times[$q]+="$(( (t1 - t0) / 1000 )) "
      bytes[$q]=$(wc -c <"$WORK/out")
    done
  done
  local held
  held=$(squeue -h -t all -o %i | wc -l)
  printf '\n%s: slurmctld holds %s jobs, %s rounds\n' "$label" "$held" "$rounds"
  printf '  %-58s %10s %10s %12s\n' query "median ms" "p90 ms" bytes
  for q in old_squeue old_scontrol new_scontrol new_array; do
    local sorted med p90
    sorted=$(tr ' ' '\n' <<<"${times[$q]}" | grep . | sort -n)
    med=$(sed -n "$(( (rounds + 1) / 2 ))p" <<<"$sorted")
    p90=$(sed -n "$(( (rounds * 9 + 9) / 10 ))p" <<<"$sorted")
    case $q in
      old_squeue) d="before: squeue --json -t all -j ID" ;;
      old_scontrol) d="before: + scontrol show job -o ID" ;;
      new_scontrol) d="after:  scontrol show job -o ID (the one query)" ;;
      new_array) d="after:  squeue -h -r -t all -j ID -o ... (arrays only)" ;;
    esac
    printf '  %-58s %10.1f %10.1f %12s\n' "$d" "$(bc -l <<<"$med/1000")" "$(bc -l <<<"$p90/1000")" "${bytes[$q]}"
  done
}

measure "baseline"

echo
echo "epilog-query: submitting $jobs held jobs as alice (sbatch -H)"
t0=$(date +%s)
seq 1 "$jobs" | (cd "$WORK" && xargs -P 4 -I{} runuser -u alice -- sbatch --parsable -H -J held-{} -o /dev/null --wrap true) >>"$IDS"
echo "epilog-query: submitted $(wc -l <"$IDS") in $(( $(date +%s) - t0 )) s"

measure "with $jobs held jobs"

cleanup
: >"$IDS"
if [ "$wait_purge" = 1 ]; then
  echo "epilog-query: waiting for slurmctld to purge the cancelled jobs (MinJobAge)"
  for _ in $(seq 1 90); do
    n=$(squeue -h -t all -o %i | wc -l)
    [ "$n" -lt 1000 ] && break
    sleep 5
  done
  echo "epilog-query: slurmctld holds $(squeue -h -t all -o %i | wc -l) jobs"
fi
rm -rf "$WORK"
