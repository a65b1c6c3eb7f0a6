#!/bin/bash
# Records real spools from the test cluster for the golden report tests
# (report/tests/golden.rs reads report/testdata/recorded/<case>/). Run as root with the cluster up;
# `two` switches the cluster to 2 nodes for the 2-node case and back to 1 node afterwards, all under
# the cluster tests' lock (`tests/record-spools.sh one`, then `two`). Then bless the golden files:
#   JOBSCOPE_BLESS=1 cargo test -p jobscope-report --test golden
set -euo pipefail
MODE=${1:?usage: record-spools.sh one|two}
REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=$REPO/report/testdata/recorded
KEEP=/var/lib/jobscope/spool-copies
CONF=/etc/jobscope/jobscope.toml
LOCK=/tmp/jobscope-cluster-tests.lock
[ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 1; }
exec 9>"$LOCK"; flock 9   # the cluster tests' lock: nothing else submits meanwhile
cp "$CONF" "$CONF.recording-backup"
trap 'mv -f "$CONF.recording-backup" "$CONF"' EXIT
printf '\n[archive]\nkeep_spools_dir = "%s"\n' "$KEEP" >> "$CONF"
work=$(mktemp -d /tmp/jobscope-record.XXXXXX); chown alice "$work"
BURN='import sys, time
end = time.time() + float(sys.argv[1])
while time.time() < end: pass'
LEAK='import time
keep = []
for i in range(40):
    keep.append(bytearray(8 * 1024 * 1024)); [keep[-1].__setitem__(j, 1) for j in range(0, len(keep[-1]), 4096)]
    time.sleep(1)'
submit() {  # case, sbatch args..., script on stdin
  local case=$1; shift
  cat > "$work/$case.sh"; chmod 755 "$work/$case.sh"; chown alice "$work/$case.sh"
  printf '%s\n' "$BURN" > "$work/burn.py"; printf '%s\n' "$LEAK" > "$work/leak.py"; chmod 644 "$work"/*.py
  local id; id=$(cd "$work" && runuser -u alice -- env -i PATH=/usr/bin:/bin HOME=/home/alice sbatch --parsable -o /dev/null "$@" "$work/$case.sh")
  while squeue -h -j "$id" -t all -o %T 2>/dev/null | grep -qE 'PENDING|RUNNING|CONFIGURING|COMPLETING'; do sleep 0.5; done
  sleep 1
  rm -rf "${OUT:?}/$case"; mkdir -p "$OUT/$case"
  # 22.05's squeue --json ignores -j and lists every job it remembers: keep only ours.
  squeue --json -t all -j "$id" | python3 -c 'import json,sys; d=json.loads(sys.stdin.buffer.read().decode("utf-8","replace")); d["jobs"]=[j for j in d["jobs"] if j["job_id"]==int(sys.argv[1])]; json.dump(d,sys.stdout,indent=1)' "$id" > "$OUT/$case/squeue.json"
  echo "$id" > "$OUT/$case/job_id"
  scontrol show job -o "$id" | grep -o 'ExitCode=[0-9:]*' | cut -d= -f2 > "$OUT/$case/exit_code2"
  # The assembling node's spool was copied at archiving; other nodes keep theirs until their next
  # epilog or `jobscope reap` sweeps it: take those from the spool itself.
  for d in "$KEEP/$id".* /var/spool/jobscope/"$id".*; do [ -d "$d" ] && cp -a "$d" "$OUT/$case/$(basename "$d" | sed "s/^$id\./node-/")"; done
  rm -rf "$KEEP/$id".*
  echo "recorded $case (job $id): $(ls "$OUT/$case")"
}
if [ "$MODE" = one ]; then
  submit serial --cpus-per-task=2 --mem=1G -J serial <<< $'#!/bin/bash\npython3 burn.py 20'
  submit parallel --cpus-per-task=2 --mem=1G -J parallel <<< $'#!/bin/bash\npython3 burn.py 20 & python3 burn.py 20; wait'
  submit leak --mem=1G -J leak <<< $'#!/bin/bash\npython3 leak.py'
  submit idle --cpus-per-task=2 --mem=2G -J idle <<< $'#!/bin/bash\npython3 burn.py 8\nsleep 30'
  submit oom --mem=150M -J oom <<< $'#!/bin/bash\npython3 -c "a = bytearray(600 * 1024 * 1024)\nfor i in range(0, len(a), 4096): a[i] = 1"'
else
  bash "$REPO/slurm-conf/cluster.sh" up --nodes 2 >/dev/null
  trap 'mv -f "$CONF.recording-backup" "$CONF"; bash "$REPO/slurm-conf/cluster.sh" up >/dev/null' EXIT
  submit two-node-imbalanced --nodes=2 --ntasks=2 --mem=500M -J imbalanced <<< $'#!/bin/bash\nsrun --nodes=1 --ntasks=1 -w $SLURMD_NODENAME python3 burn.py 20'
fi
rm -rf "$work"
