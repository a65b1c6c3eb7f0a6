#!/bin/bash
# Runs in the jobscope VM (slurm-conf/vm/capture.sh queues it through vm.sh run): submits test jobs
# as alice and records what SLURM and the kernel show for them, into the share's out/capture/.
#   capture.sh main     versions, config, the slurmstepd scope, and one job that burns ~3 s of
#                       CPU, touches 256 MiB and writes 10 MiB with O_DIRECT, then sleeps 20 s: its
#                       cgroup files while it runs (work done), SLURM's records running and ended,
#                       the Epilog's environment
#   capture.sh states   a cancelled job (scancel while running), a job killed at its time limit
#                       (-t 1: 60-90 s), a job OOM-killed (--mem=100M): records and Epilog env
set -u
PATH=/usr/sbin:/usr/bin:/sbin:/bin
S=/mnt/jobscope
O=$S/out/capture
W=/home/alice/cap
mkdir -p "$O" "$S/epilog"
: >"$S/epilog/record"   # jobscope-vm-epilog.sh records what its Epilog sees only while this exists
install -d -o alice -g alice "$W"
log() { echo "capture: [$(cut -d' ' -f1 /proc/uptime)] $*" >&2; }
asuser() { runuser -u alice -- env -i PATH=/usr/bin:/bin HOME=/home/alice "$@"; }
state() { scontrol show job -o "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
wait_state() {  # wait_state ID TIMEOUT_S STATE...: until the job is in one of STATEs
  local id=$1 t=$2 i st; shift 2
  for i in $(seq 1 $(( t * 5 ))); do
    st=$(state "$id")
    for s in "$@"; do [ "$st" = "$s" ] && return 0; done
    sleep 0.2
  done
  log "job $id: still $st after $t s (wanted $*)"; return 1
}
wait_ended() {  # until the job left RUNNING/COMPLETING and its Epilog wrote what it records
  local id=$1 t=$2 i st
  for i in $(seq 1 $(( t * 5 ))); do
    st=$(state "$id")
    case "$st" in PENDING|RUNNING|COMPLETING|CONFIGURING|SUSPENDED|"") sleep 0.2 ;; *) break ;; esac
  done
  for i in $(seq 1 50); do [ -s "$S/epilog/scontrol-json-$id.json" ] && break; sleep 0.2; done
  log "job $id ended: $(state "$id")"
}
records() {  # records ID PREFIX WHEN
  scontrol show job -o "$1" >"$O/$2-scontrol-$3.txt" 2>&1
  scontrol --json show job "$1" >"$O/$2-scontrol-json-$3.json" 2>&1
  squeue --json -t all -j "$1" >"$O/$2-squeue-json-$3.json" 2>&1
}
epilog_files() {  # epilog_files ID PREFIX: what the Epilog recorded (jobscope-vm-epilog.sh)
  local f b
  for f in "$S"/epilog/*-"$1".txt "$S"/epilog/*-"$1".json; do
    [ -f "$f" ] || continue
    b=$(basename "$f"); b=${b%-"$1".*}; cp "$f" "$O/$2-epilog-$b.${f##*.}"
  done
}
dump_cg() {  # dump_cg DIR NAME: the files of a cgroup and the contents of those jobscope reads
  local d=$1 n=$2 f
  { echo "# $d"; ls -1 "$d" 2>&1; } >"$O/cg-$n.files.txt"
  {
    echo "# $d"
    for f in cgroup.controllers cgroup.subtree_control cgroup.procs cpu.stat memory.current memory.peak \
             memory.events memory.events.local memory.max memory.swap.max io.stat io.max pids.current pids.peak \
             pids.max cpu.pressure memory.pressure io.pressure cpuset.cpus.effective cpu.max; do
      if [ -e "$d/$f" ]; then echo "== $f"; cat "$d/$f" 2>&1; else echo "== $f: absent"; fi
    done
    echo "== memory.stat (first 12 lines)"; head -n 12 "$d/memory.stat" 2>&1
  } >"$O/cg-$n.txt"
}

main() {
  local id t0 cg task job scope
  t0=$(cut -d' ' -f1 /proc/uptime)
  sinfo -V >"$O/sinfo-V.txt" 2>&1
  slurmd -V >"$O/slurmd-V.txt" 2>&1
  scontrol --version >"$O/scontrol-version.txt" 2>&1
  uname -r >"$O/uname-r.txt"
  systemctl --version | head -n1 >"$O/systemd-version.txt"
  scontrol show config >"$O/scontrol-show-config.txt" 2>&1
  cat /sys/fs/cgroup/cgroup.controllers >"$O/root-cgroup.controllers.txt"
  cat /sys/fs/cgroup/system.slice/cgroup.subtree_control >"$O/system.slice-cgroup.subtree_control.txt"
  cat /run/jobscope-vm/io >"$O/io-setting.txt"
  journalctl -b -u slurmd --no-pager -o cat 2>/dev/null | grep jobscope-vm-cgroup-io >"$O/slurmd-execstartpost.txt" || true
  scope=$(ls -d /sys/fs/cgroup/system.slice/*slurmstepd.scope 2>/dev/null | head -n1)
  echo "$scope" >"$O/slurmstepd-scope-path.txt"
  dump_cg "$scope" scope-idle
  cat >"$W/main.sh" <<'JOB'
#!/bin/bash
W=/home/alice/cap
cat /proc/self/cgroup >"$W/main-$SLURM_JOB_ID.cgroup"
echo $$ >"$W/main-$SLURM_JOB_ID.pid"
python3 - <<'PY'
import time
b = bytearray(256 * 1024 * 1024)
for i in range(0, len(b), 4096):
    b[i] = 1
end = time.process_time() + 3.0
while time.process_time() < end:
    pass
PY
dd if=/dev/zero of="$W/dd-$SLURM_JOB_ID" bs=1M count=10 oflag=direct 2>"$W/main-$SLURM_JOB_ID.dd"
touch "$W/main-$SLURM_JOB_ID.worked"
sleep 20
JOB
  chown alice: "$W/main.sh"
  id=$(asuser sbatch --parsable -D "$W" -J 'cap main' -c 1 --mem=1G -t 5 -o "$W/%j.out" "$W/main.sh") || { log "sbatch failed"; return 1; }
  echo "$id" >"$O/main-job-id.txt"
  log "main job $id"
  wait_state "$id" 60 RUNNING || return 1
  for i in $(seq 1 600); do [ -e "$W/main-$id.worked" ] && break; sleep 0.2; done
  [ -e "$W/main-$id.worked" ] || { log "job $id did not finish its work in 120 s"; }
  # the cgroup first (the job sleeps 20 s after its work; everything is slow under emulation)
  cg=$(sed -n 's/^0:://p' "$W/main-$id.cgroup")
  echo "$cg" >"$O/main-task-cgroup-path.txt"
  cp "$W/main-$id.cgroup" "$O/main-proc-self-cgroup.txt"
  task=/sys/fs/cgroup$cg
  job=${task%%/step_*}
  dump_cg "$scope" scope-running
  dump_cg "$job" job
  dump_cg "$job/step_batch" step_batch
  dump_cg "$job/step_batch/user" step_batch-user
  dump_cg "$task" task_0
  dump_cg "$job/step_extern" step_extern
  { echo "# find $job -type d"; find "$job" -type d; } >"$O/main-job-cgroup-tree.txt"
  records "$id" main running
  cp "$W/main-$id.dd" "$O/main-dd-stderr.txt"
  wait_ended "$id" 120
  records "$id" main ended
  [ -d "$job" ] && echo "job cgroup still present after the end" >"$O/main-job-cgroup-after-end.txt" \
                || echo "job cgroup gone after the end: $job" >"$O/main-job-cgroup-after-end.txt"
  epilog_files "$id" main
  echo "main job done at uptime $(cut -d' ' -f1 /proc/uptime) (capture started at $t0)" >"$O/main-timing.txt"
}

states() {
  local tid oid cid
  tid=$(asuser sbatch --parsable -D "$W" -J 'cap timeout' -c 1 --mem=200M -t 1 -o "$W/%j.out" --wrap 'sleep 300')
  oid=$(asuser sbatch --parsable -D "$W" -J 'cap oom' -c 1 --mem=100M -t 5 -o "$W/%j.out" \
        --wrap "python3 -c 'b = bytearray(400 * 1024 * 1024)
for i in range(0, len(b), 4096): b[i] = 1'")
  cid=$(asuser sbatch --parsable -D "$W" -J 'cap cancel' -c 1 --mem=200M -t 5 -o "$W/%j.out" --wrap 'sleep 300')
  printf 'timeout %s\noom %s\ncancel %s\n' "$tid" "$oid" "$cid" >"$O/states-job-ids.txt"
  log "timeout $tid, oom $oid, cancel $cid"
  wait_ended "$oid" 120
  records "$oid" oom ended; epilog_files "$oid" oom
  cp "$W/$oid.out" "$O/oom-job-output.txt" 2>/dev/null || true
  wait_state "$cid" 120 RUNNING && sleep 2
  records "$cid" cancel running
  scancel "$cid"
  wait_ended "$cid" 60
  records "$cid" cancel ended; epilog_files "$cid" cancel
  wait_ended "$tid" 240
  records "$tid" timeout ended; epilog_files "$tid" timeout
}

case "${1:-}" in
  main) main ;;
  states) states ;;
  *) echo "usage: capture.sh main|states" >&2; exit 2 ;;
esac
