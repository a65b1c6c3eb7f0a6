#!/bin/bash
# srun true latency with and without the jobscope plugin, interleaved (A B A B …) in one run
# because these machines are noisy. Needs the test cluster up (slurm-conf/cluster.sh up) and runs
# as root; jobs run as alice. Prints median and p90 per mode and the difference.
#
#   bench/srun-latency.sh [rounds]      (default 15)
set -euo pipefail
ROUNDS=${1:-15}
CONF=/etc/slurm/plugstack.conf.d/jobscope.conf
[ "$(id -u)" = 0 ] || { echo "srun-latency: run as root" >&2; exit 1; }
[ -f "$CONF" ] || { echo "srun-latency: $CONF missing: slurm-conf/cluster.sh install first" >&2; exit 1; }
# Hold the cluster tests' lock: nothing else submits while the plugstack line is switched.
exec 9>/tmp/jobscope-cluster-tests.lock; flock 9
orig=$(cat "$CONF")
restore() { printf '%s\n' "$orig" > "$CONF.tmp" && mv -f "$CONF.tmp" "$CONF"; }
trap restore EXIT
set_mode() {  # on|off: slurmstepd and srun re-read plugstack for every step
  if [ "$1" = on ]; then printf '%s\n' "$orig" > "$CONF.tmp"; else printf '# off for the benchmark\n' > "$CONF.tmp"; fi
  mv -f "$CONF.tmp" "$CONF"
}
one() {  # seconds for one `srun -n1 true` as alice, submit to exit
  local t0 t1
  t0=$(date +%s%N)
  runuser -u alice -- env -i PATH=/usr/bin:/bin HOME=/home/alice srun -n1 --mem=100M true
  t1=$(date +%s%N)
  echo $(( (t1 - t0) / 1000000 ))
}
declare -a on off
set_mode on; one >/dev/null   # warm-up: first job after start waits for the scheduler
for i in $(seq 1 "$ROUNDS"); do
  set_mode on;  on+=("$(one)")
  set_mode off; off+=("$(one)")
done
stats() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {printf "median %5d ms   p90 %5d ms   (n=%d)", a[int((NR+1)/2)], a[int(NR*0.9+0.5)], NR}'; }
med() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "srun -n1 true, submit to exit, $ROUNDS interleaved rounds:"
echo "  with jobscope:    $(stats "${on[@]}")"
echo "  without jobscope: $(stats "${off[@]}")"
echo "  difference of medians: $(( $(med "${on[@]}") - $(med "${off[@]}") )) ms"
