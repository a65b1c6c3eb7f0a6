#!/bin/bash
# The jobscope TEST cluster: a real SLURM 22.05 on this Debian 12 host, loopback only, as root.
#
#   slurm-conf/cluster.sh up [--nodes 1|2|4] [--clean] (re)start munged, slurmctld, slurmd(s)
#   slurm-conf/cluster.sh down                         stop them, clean up
#   slurm-conf/cluster.sh status                       mode, daemons, nodes, installed bits
#   slurm-conf/cluster.sh node-exec NODE CMD...        run CMD (as root, cwd /) in NODE's mount
#                                                      namespace, i.e. with NODE's private jobscope
#                                                      dirs (nsenter -t <slurmd pid> -m); CMD's exit
#                                                      status. NODE: a node of the running mode, or
#                                                      n1..n4 for <host>n1..<host>n4
#   slurm-conf/cluster.sh node-dir NODE                print the host directory backing NODE's
#                                                      private dirs in 4-node mode (works while down)
#   slurm-conf/cluster.sh install                      install target/release/* + config + plugstack line
#                                                      (+ the fake NVML library, test cluster only)
#   slurm-conf/cluster.sh install --packages DIR       the same from the .debs in DIR (apt install; the
#                                                      /usr/local paths become links to the packaged files)
#   slurm-conf/cluster.sh install --demo               what the demo runs only: not the test-only files
#                                                      (fault-injection plugin, fake NVML), nor a word on them
#
# up --nodes 1 (default): one slurmd named `hostname -s`, Debian's standard paths
#   (/etc/slurm, /run/slurmctld.pid, /run/slurmd.pid, /var/lib/slurm/{slurmctld,slurmd}).
# up --nodes 2: two slurmd on 127.0.0.1 (`slurmd -N <host>n1|<host>n2`, ports 6821/6822),
#   per-node paths with %n (/run/slurmd-%n.pid, /var/lib/slurm/slurmd-%n, slurmd-%n.log).
#   Both share the host's jobscope directories.
# up --nodes 4: four slurmd on 127.0.0.1 (<host>n1..<host>n4, ports 6821..6824, paths as in 2-node
#   mode), each in its OWN MOUNT NAMESPACE, as on a real cluster where nodes share nothing but
#   SLURM: node N sees private, writable /var/lib/jobscope, /var/spool/jobscope, /var/log/jobscope,
#   /run/jobscope and /run/jobscope-live, bind mounts of the host directories
#   /var/lib/jobscope-nodes/<node>/{lib,spool,log,run,live} (`node-dir NODE` prints the first
#   part). slurmd's slurmstepds, the SPANK plugin in them and the Epilog inherit the namespace;
#   srun/sbatch and the jobscope CLI run on this host are the "service host" with the host's own
#   directories, which the nodes do not see. `up` empties the per-node directories (jobs start
#   clean); `down` leaves them for inspection. /run (pid files), /var/lib/slurm and /var/log/slurm
#   are shared as in the other modes.
# The kernel collector (jobscope-kernel) runs in 1-node mode only.
# Only one mode runs at a time: `up` first stops whatever runs (it is idempotent: a second
# `up` restarts cleanly). --clean also wipes slurmctld's saved state (job ids restart at 1, so
# the host's /var/lib/jobscope/{archive,state} and mail queue of earlier jobs are moved to
# /var/lib/jobscope/.set-aside/<time>/);
# without it job ids keep increasing across restarts (node states are always reset).
# The config is generated from slurm-conf/test-cluster/*.in into /etc/slurm.
# Daemons run with a clean environment (env -i) so nothing leaks into job output.
# Logs: /var/log/slurm/{slurmctld,slurmd,slurmd-<node>,jobcomp,mailprog}.log (previous run: *.log.1)
#   4-node mode: each node's jobscope logs (epilog.log ...) are in $(node-dir NODE)/log.
#
# Env: JOBSCOPE_CLUSTER_UP_TIMEOUT (s, default 60): how long `up` waits for idle nodes.
#      CARGO_TARGET_DIR: where `install` looks for release/ (default: <repo>/target).
set -euo pipefail
# Daemons started from here must not inherit the caller's file descriptors (e.g. a held
# `flock` on the cluster tests' lock would then be kept by munged forever): close inherited ones.
for fd in /proc/$$/fd/*; do
  n=${fd##*/}
  if [ "$n" -gt 2 ] 2>/dev/null && [ "$n" != 255 ]; then eval "exec $n>&-" 2>/dev/null || true; fi
done
unset SLURM_CONF   # always /etc/slurm/slurm.conf, for the daemons (env -i) and for us

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
TPL=$HERE/test-cluster
HOST=$(hostname -s)
ETC=/etc/slurm
DAEMON_PATH=/usr/sbin:/usr/bin:/sbin:/bin
DENV=(env -i "PATH=$DAEMON_PATH" LANG=C.UTF-8)
RUNDIR=/run/jobscope-test-cluster          # our bookkeeping: mode, munged we started
CTLD_PID=/run/slurmctld.pid
STATE_SAVE=/var/lib/slurm/slurmctld
LOGDIR=/var/log/slurm
CLUSTER_NAME=jobscope
UP_TIMEOUT=${JOBSCOPE_CLUSTER_UP_TIMEOUT:-60}

PLUGIN_SO=/usr/local/lib/slurm/jobscope_spank.so
# The plugin built with the fault-injection feature (tests/run-all.sh builds it as
# target/release/jobscope_spank_faults.so), for the cluster tests' inject= cases only: beside the
# packaged plugin under its own name, loaded only by a plugstack line a test writes for its jobs.
FAULTS_PLUGIN_SO=/usr/local/lib/slurm/jobscope_spank_faults.so
CLI_BIN=/usr/local/bin/jobscope
EPILOG_BIN=/usr/local/sbin/jobscope-epilog
JS_CONFIG=/etc/jobscope/jobscope.toml
PLUGSTACK=$ETC/plugstack.conf
PLUGSTACK_D=$ETC/plugstack.conf.d
PLUGSTACK_LINE="optional $PLUGIN_SO"
PLACEHOLDER_MARK=JOBSCOPE-EPILOG-PLACEHOLDER
# The scriptable fake libnvidia-ml.so (tests/fake-nvml), for the GPU cluster tests only: it is
# never on the dynamic linker's path and nothing loads it unless a test's [gpu] nvml_lib_path
# names it (tests/cluster/tests/gpu.rs copies it next to its own fake-nvml.json script).
FAKE_NVML_DIR=/usr/local/lib/jobscope-test
FAKE_NVML_SO=$FAKE_NVML_DIR/libfake_nvml.so
# The same for the fake libdcgm.so (tests/fake-dcgm): loaded only where a test's [gpu]
# dcgm_lib_path names its copy.
FAKE_DCGM_SO=$FAKE_NVML_DIR/libfake_dcgm.so

export PATH="$DAEMON_PATH:${PATH:-}"

log()  { echo "cluster: $*"; }
warn() { echo "cluster: WARNING: $*" >&2; }
die()  { echo "cluster: ERROR: $*" >&2; exit 1; }
# shellcheck source=slurm-conf/lib/proc.sh
. "$HERE/lib/proc.sh"

need_root() { [ "$(id -u)" = 0 ] || die "must run as root"; }

# node names / slurmd pid files of a mode (1, 2 or 4)
node_names() {
  case "$1" in
    2) echo "${HOST}n1 ${HOST}n2" ;;
    4) echo "${HOST}n1 ${HOST}n2 ${HOST}n3 ${HOST}n4" ;;
    *) echo "$HOST" ;;
  esac
}
multi_node() { [ "$1" = 2 ] || [ "$1" = 4 ]; }   # the modes with slurmd -N <node> and %n paths
slurmd_pidfile() { if multi_node "$1"; then echo "/run/slurmd-$2.pid"; else echo /run/slurmd.pid; fi; }
slurmd_logfile() { if multi_node "$1"; then echo "$LOGDIR/slurmd-$2.log"; else echo "$LOGDIR/slurmd.log"; fi; }
all_our_node_names() { echo "$HOST ${HOST}n1 ${HOST}n2 ${HOST}n3 ${HOST}n4"; }

# 4-node mode: each slurmd's private jobscope directories, "<subdir of the node's dir>:<mount point>"
NODE_DIRS_ROOT=/var/lib/jobscope-nodes
NODE_MOUNTS=(lib:/var/lib/jobscope spool:/var/spool/jobscope log:/var/log/jobscope
             run:/run/jobscope live:/run/jobscope-live)
node_dir() { echo "$NODE_DIRS_ROOT/$1"; }

current_mode() { [ -s "$RUNDIR/mode" ] && cat "$RUNDIR/mode" || true; }

# ---------------------------------------------------------------- cgroups
cgroup_v1_ok() {
  local c
  for c in cpuset memory freezer cpuacct; do
    awk -v c="$c" '$3 == "cgroup" { n = split($4, o, ","); for (i = 1; i <= n; i++) if (o[i] == c) f = 1 }
                   END { exit !f }' /proc/mounts || return 1
  done
}

# remove empty cgroup dirs SLURM created for our node names (slurm_<node>), depth-first
cleanup_cgroups() {
  local name d left=()
  for name in $(all_our_node_names); do
    for d in /sys/fs/cgroup/*/"slurm_$name" /sys/fs/cgroup/"slurm_$name"; do
      [ -d "$d" ] || continue
      find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
      [ -d "$d" ] && left+=("$d")
    done
  done
  if [ "${#left[@]}" -gt 0 ]; then
    warn "cgroups still in use (processes left?), not removed: ${left[*]}"
  fi
  return 0
}

# ---------------------------------------------------------------- kernel collector
# jobscope-kernel (the BPF collector, docs/kernel.md), started by `up` before slurmd and stopped by
# `down`, by its pid file, as the service would run it on a real node, but with system-call
# and page-cache counting on (the cluster tests check them; both are off by default). Where it
# cannot run (no BTF, no BPF, not installed) the jobs' reports say so in a note, and the tests of
# the kernel view fail: CI's machines have it.
KERNEL_PID=$RUNDIR/jobscope-kernel.pid
KERNEL_LOG=/var/log/jobscope/kernel.log
start_collector() {
  local bin=
  for b in /usr/local/sbin/jobscope-kernel /usr/sbin/jobscope-kernel; do
    [ -x "$b" ] && { bin=$b; break; }
  done
  [ -n "$bin" ] || { warn "jobscope-kernel is not installed: no kernel view"; return 0; }
  install -d -m 0750 "$(dirname "$KERNEL_LOG")"
  setsid "$bin" run --syscalls --page-cache >>"$KERNEL_LOG" 2>&1 </dev/null &
  echo $! >"$KERNEL_PID"
  if wait_until 30 test -e /sys/fs/bpf/jobscope/state; then
    log "kernel collector up ($bin, pid $(cat "$KERNEL_PID"))"
  else
    warn "the kernel collector did not pin its maps within 30 s: $(tail -n 3 "$KERNEL_LOG" | tr '\n' ' ')"
  fi
}
stop_collector() {
  stop_pidfile "$KERNEL_PID" jobscope-kernel
}

# ---------------------------------------------------------------- down
cancel_jobs() {
  # Cancel remaining jobs while slurmctld/slurmd are still up, so slurmstepd kills the job
  # processes, runs the epilog and removes the job cgroups.
  [ -n "$(live_pid "$CTLD_PID" slurmctld)" ] || return 0
  local ids i
  ids=$(timeout 10 squeue -h -o %i -t PD,CF,R,S,CG 2>/dev/null | tr '\n' ' ' || true)
  [ -n "${ids// /}" ] || return 0
  log "cancelling jobs: $ids"
  # shellcheck disable=SC2086
  timeout 10 scancel $ids 2>/dev/null || true
  for i in $(seq 1 150); do
    [ -z "$(timeout 5 squeue -h -o %i -t PD,CF,R,S,CG 2>/dev/null || true)" ] && return 0
    sleep 0.2
  done
  warn "jobs still not finished 30 s after scancel: $(timeout 5 squeue -h -o '%i:%T' 2>/dev/null | tr '\n' ' ')"
}

cmd_down() {
  need_root
  local t0 pf n
  t0=$(now)
  cancel_jobs
  for pf in /run/slurmd.pid /run/slurmd-*.pid; do
    [ -e "$pf" ] && stop_pidfile "$pf" slurmd
  done
  stop_pidfile "$CTLD_PID" slurmctld
  stop_collector
  if [ -s "$RUNDIR/munged.pid" ]; then
    # only a munged that this script started
    n=$(cat "$RUNDIR/munged.pid")
    if [ "$(live_pid /run/munge/munged.pid munged)" = "$n" ]; then
      stop_pidfile /run/munge/munged.pid munged
    fi
    rm -f "$RUNDIR/munged.pid"
  fi
  cleanup_cgroups
  rm -f "$RUNDIR/mode"
  log "down ($(since "$t0") s)"
}

# ---------------------------------------------------------------- config
ensure_plugstack_include() {
  install -d -m 0755 "$PLUGSTACK_D"
  if [ ! -f "$PLUGSTACK" ]; then
    printf 'include %s/*.conf\n' "$PLUGSTACK_D" >"$PLUGSTACK"
    log "created $PLUGSTACK"
  elif ! grep -Eq "^[[:space:]]*include[[:space:]]+$PLUGSTACK_D/\*\.conf" "$PLUGSTACK"; then
    printf '# added by jobscope slurm-conf/cluster.sh\ninclude %s/*.conf\n' "$PLUGSTACK_D" >>"$PLUGSTACK"
    log "added 'include $PLUGSTACK_D/*.conf' to $PLUGSTACK"
  fi
}

write_slurm_conf() {
  local mode=$1 cpus realmem memtotal tmp
  memtotal=$(awk '/^MemTotal:/ { print int($2 / 1024) }' /proc/meminfo)
  realmem=$(( memtotal - 512 ))
  if multi_node "$mode"; then
    cpus=$(nproc); [ "$cpus" -ge 2 ] && cpus=2
    realmem=$(( realmem / mode ))
  else
    cpus=$(nproc)
  fi
  [ "$realmem" -ge 1000 ] || realmem=1000
  tmp=$(mktemp)
  cat "$TPL/slurm.conf.in" "$TPL/nodes-$mode.conf.in" \
    | sed -e "s/@HOST@/$HOST/g" -e "s/@NNODES@/$mode/g" -e "s/@CPUS@/$cpus/g" \
          -e "s/@REALMEM@/$realmem/g" >"$tmp"
  if grep -q '@[A-Z_]*@' "$tmp"; then
    rm -f "$tmp"; die "unsubstituted @VAR@ left in generated slurm.conf (check $TPL)"
  fi
  install -d -m 0755 "$ETC"
  install -m 0644 "$tmp" "$ETC/slurm.conf"
  rm -f "$tmp"
  install -m 0644 "$TPL/cgroup.conf" "$ETC/cgroup.conf"
  install -m 0644 "$TPL/gres.conf" "$ETC/gres.conf"
  install -m 0755 "$TPL/mailprog.sh" "$ETC/jobscope-test-mailprog.sh"
  install -m 0755 "$TPL/prolog.sh" "$ETC/jobscope-test-prolog.sh"
  ensure_plugstack_include
  log "wrote $ETC/slurm.conf ($mode node(s) x $cpus CPUs, RealMemory=$realmem MB each)"
}

check_installed() {
  if [ ! -x "$EPILOG_BIN" ]; then
    warn "$EPILOG_BIN is not installed: installing a do-nothing placeholder (a missing Epilog would drain the node). Run: cargo build --release --workspace && $0 install"
    install -D -m 0755 "$TPL/epilog-placeholder.sh" "$EPILOG_BIN"
  elif grep -q "$PLACEHOLDER_MARK" "$EPILOG_BIN" 2>/dev/null; then
    warn "$EPILOG_BIN is the do-nothing placeholder (run: $0 install)"
  fi
  if [ -f "$PLUGSTACK_D/jobscope.conf" ]; then
    [ -f "$PLUGIN_SO" ] || warn "$PLUGSTACK_D/jobscope.conf is present but $PLUGIN_SO is not installed"
  else
    warn "jobscope SPANK plugin not configured ($PLUGSTACK_D/jobscope.conf missing; run: $0 install)"
  fi
}

# ---------------------------------------------------------------- up
start_munged() {
  install -d -o munge -g munge -m 0755 /run/munge
  install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge
  [ -s /etc/munge/munge.key ] || die "/etc/munge/munge.key missing (run slurm-conf/install-deps.sh)"
  if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    log "munged already running (not started by us; left alone)"
    return 0
  fi
  # --force: start even if a dead munged left its socket/lock behind
  "${DENV[@]}" /usr/sbin/runuser -u munge -- /usr/sbin/munged --force
  local i
  for i in $(seq 1 50); do
    munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break
    sleep 0.1
  done
  munge -n 2>/dev/null | unmunge >/dev/null 2>&1 || die "munged did not start (see /var/log/munge/munged.log)"
  live_pid /run/munge/munged.pid munged >"$RUNDIR/munged.pid"
}

rotate_logs() {
  local f
  install -d -o slurm -g slurm -m 0755 "$LOGDIR"
  for f in "$LOGDIR"/slurmctld.log "$LOGDIR"/slurmd.log "$LOGDIR"/slurmd-*.log; do
    [ -f "$f" ] && mv -f "$f" "$f.1"
  done
  return 0
}

show_failure() {
  local mode=$1 n
  echo "---- sinfo -N -l" >&2
  timeout 5 sinfo -N -l >&2 2>&1 || true
  echo "---- node reasons" >&2
  timeout 5 sinfo -h -N -o '%N %T %E' >&2 2>&1 || true
  echo "---- tail $LOGDIR/slurmctld.log" >&2
  tail -n 25 "$LOGDIR/slurmctld.log" >&2 2>/dev/null || true
  for n in $(node_names "$mode"); do
    echo "---- tail $(slurmd_logfile "$mode" "$n")" >&2
    tail -n 25 "$(slurmd_logfile "$mode" "$n")" >&2 2>/dev/null || true
  done
  if [ "$mode" = 4 ]; then
    for n in $(node_names "$mode"); do
      [ -s "$(node_dir "$n")/log/epilog.log" ] || continue
      echo "---- tail $(node_dir "$n")/log/epilog.log (the node's private /var/log/jobscope)" >&2
      tail -n 10 "$(node_dir "$n")/log/epilog.log" >&2 2>/dev/null || true
    done
  fi
}

# ---------------------------------------------------------------- 4-node mode: private node dirs
# (Re)create the directories backing NODE's private jobscope dirs (root, 0755; jobscope tightens
# the modes it wants itself, as on a fresh node), emptied, and the host's mount points.
prepare_node_dirs() {
  local node=$1 m d
  install -d -o root -g root -m 0755 "$NODE_DIRS_ROOT" "$(node_dir "$node")"
  for m in "${NODE_MOUNTS[@]}"; do
    d=$(node_dir "$node")/${m%%:*}
    install -d -o root -g root -m 0755 "$d"
    find "$d" -mindepth 1 -delete || die "could not empty $d"
    [ -d "${m#*:}" ] || install -d -o root -g root -m 0755 "${m#*:}"
  done
}

# Start `slurmd -N NODE` in a new mount namespace (private propagation: nothing leaks back to the
# host) with NODE's dirs bind-mounted over the jobscope paths. slurmd daemonizes; the namespace
# lives as long as slurmd and what it starts (slurmstepd, Prolog, Epilog) run.
start_slurmd_private() {
  local node=$1 m args=()
  for m in "${NODE_MOUNTS[@]}"; do args+=("$(node_dir "$node")/${m%%:*}" "${m#*:}"); done
  # shellcheck disable=SC2016  # $1.. are the inner shell's
  "${DENV[@]}" unshare --mount --propagation private -- /bin/sh -ec '
    node=$1; shift
    while [ $# -gt 0 ]; do mount --bind "$1" "$2"; shift 2; done
    exec /usr/sbin/slurmd -N "$node"' sh "$node" "${args[@]}"
}

# Check that slurmd PID of NODE runs in its own mount namespace and sees NODE's dirs; prints why not.
check_node_ns() {
  local node=$1 pid=$2 m want got
  [ "$(readlink "/proc/$pid/ns/mnt")" != "$(readlink /proc/self/ns/mnt)" ] \
    || { echo "slurmd $node (pid $pid) runs in the host's mount namespace"; return 1; }
  for m in "${NODE_MOUNTS[@]}"; do
    want=$(stat -c %d:%i "$(node_dir "$node")/${m%%:*}")
    got=$(nsenter -t "$pid" -m -- stat -c %d:%i "${m#*:}" 2>&1) || true
    [ "$want" = "$got" ] \
      || { echo "slurmd $node (pid $pid): ${m#*:} is not $(node_dir "$node")/${m%%:*} in its namespace"; return 1; }
  done
}

# NODE as given (a node name, or n1..n4 for <host>n1..) -> the node name of MODE; dies if none
resolve_node() {
  local mode=$1 want=$2 n
  for n in $(node_names "$mode"); do
    if [ "$n" = "$want" ] || [ "$n" = "$HOST$want" ]; then echo "$n"; return 0; fi
  done
  die "'$want' is not a node of the ${mode}-node cluster ($(node_names "$mode"))"
}

ctld_up() { local o; o=$(timeout 5 scontrol ping 2>/dev/null) || true; [[ $o == *'is UP'* ]]; }

sched_ran() {
  local n
  n=$(timeout 5 sdiag 2>/dev/null | awk -F: '/Total cycles/ && !s { s = 1; print $2 + 0 }') || return 1
  [ "${n:-0}" -ge 1 ]
}

nodes_idle() {
  local want=$1 states n st
  states=$(timeout 5 sinfo -h -N -o '%N %T' 2>/dev/null) || return 1
  for n in $want; do
    st=$(awk -v n="$n" '$1 == n { print $2; exit }' <<<"$states")
    [ "$st" = idle ] || return 1
  done
}

cmd_up() {
  need_root
  local mode=1 clean=0 t0 n pid names foreign why
  while [ $# -gt 0 ]; do
    case "$1" in
      --nodes) mode=${2:-}; shift 2 || die "--nodes needs a value" ;;
      --nodes=*) mode=${1#--nodes=}; shift ;;
      --clean) clean=1; shift ;;
      *) die "up: unknown argument '$1' (usage: up [--nodes 1|2|4] [--clean])" ;;
    esac
  done
  [ "$mode" = 1 ] || [ "$mode" = 2 ] || [ "$mode" = 4 ] || die "--nodes must be 1, 2 or 4 (got '$mode')"
  for b in /usr/sbin/slurmctld /usr/sbin/slurmd /usr/sbin/munged /usr/bin/sinfo; do
    [ -x "$b" ] || die "$b not found: run slurm-conf/install-deps.sh first"
  done
  if [ "$mode" = 4 ]; then
    for b in unshare nsenter mount; do
      command -v "$b" >/dev/null || die "$b not found (util-linux/mount): needed for the 4-node mode"
    done
  fi
  cgroup_v1_ok || die "the cgroup v1 controllers cpuset, memory, freezer and cpuacct must be mounted under /sys/fs/cgroup (this test cluster uses CgroupPlugin=cgroup/v1; a pure cgroup v2 host is not supported)"
  id slurm >/dev/null 2>&1 || die "user 'slurm' missing (the slurm packages create it; run slurm-conf/install-deps.sh)"
  names=$(node_names "$mode")
  t0=$(now)

  # 1. stop whatever runs (either mode), then make sure no foreign daemon holds the ports
  if [ -n "$(live_pid "$CTLD_PID" slurmctld)" ]; then
    local m; m=$(current_mode)
    log "stopping the running cluster first (${m:-?}-node mode)"
  fi
  cmd_down >/dev/null
  for n in slurmctld slurmd; do
    foreign=$(pids_named "$n")
    [ -z "$foreign" ] || die "a $n not started by this script is running (pid $foreign, no pid file of ours): stop it first"
  done

  # 2. config + directories
  install -d -m 0755 "$RUNDIR"
  write_slurm_conf "$mode"
  check_installed
  install -d -o slurm -g slurm -m 0755 /var/lib/slurm "$STATE_SAVE"
  for n in $names; do
    if multi_node "$mode"; then install -d -m 0755 "/var/lib/slurm/slurmd-$n"; else install -d -m 0755 /var/lib/slurm/slurmd; fi
    if [ "$mode" = 4 ]; then prepare_node_dirs "$n"; fi
  done
  if [ -s "$STATE_SAVE/clustername" ] && [ "$(cat "$STATE_SAVE/clustername")" != "$CLUSTER_NAME" ]; then
    log "state in $STATE_SAVE is from cluster '$(cat "$STATE_SAVE/clustername")': wiping it"
    clean=1
  fi
  if [ "$clean" = 1 ]; then
    find "$STATE_SAVE" -mindepth 1 -delete
    # Job ids start again at 1: the archive's records, the state and the mail queue's markers of
    # earlier jobs with those ids would read as the new jobs' (a second record, an `archived`
    # marker, a second `sent` marker). Set them aside; the mail queue is made again, 0700.
    local aside d
    aside=/var/lib/jobscope/.set-aside/$(date +%Y%m%d-%H%M%S)
    for d in /var/lib/jobscope/archive /var/lib/jobscope/state /var/spool/jobscope/mail; do
      if [ -d "$d" ] && [ -n "$(ls -A "$d" 2>/dev/null)" ]; then
        install -d -m 0700 "$aside"
        mv "$d" "$aside/${d//\//_}"
        log "--clean: job ids restart at 1; the earlier $d is set aside in $aside"
      fi
    done
    install -d -m 0700 /var/spool/jobscope/mail
  else
    # keep the job id sequence, but not node states (a node drained by an earlier test stays
    # drained across restarts otherwise)
    rm -f "$STATE_SAVE"/node_state "$STATE_SAVE"/node_state.old
  fi
  rotate_logs

  # 3. daemons
  # The kernel view counts per job id on a machine; two slurmd on one host would share each
  # job's counters (and the first node's end would remove them for the other): 1 node only.
  if [ "$mode" = 1 ]; then start_collector; fi
  start_munged
  "${DENV[@]}" /usr/sbin/slurmctld || { show_failure "$mode"; die "slurmctld failed to start"; }
  wait_until 30 ctld_up || { show_failure "$mode"; die "slurmctld did not answer 'scontrol ping' within 30 s"; }
  for n in $names; do
    if [ "$mode" = 4 ]; then
      start_slurmd_private "$n" || { show_failure "$mode"; die "slurmd -N $n (own mount namespace) failed to start"; }
    elif [ "$mode" = 2 ]; then
      "${DENV[@]}" /usr/sbin/slurmd -N "$n" || { show_failure "$mode"; die "slurmd -N $n failed to start"; }
    else
      "${DENV[@]}" /usr/sbin/slurmd || { show_failure "$mode"; die "slurmd failed to start"; }
    fi
  done
  echo "$mode" >"$RUNDIR/mode"
  if ! wait_until "$UP_TIMEOUT" nodes_idle "$names"; then
    show_failure "$mode"
    die "node(s) $names not idle after ${UP_TIMEOUT} s (daemons left running for inspection; stop with: $0 down)"
  fi
  for n in $names; do
    pid=$(live_pid "$(slurmd_pidfile "$mode" "$n")" slurmd)
    [ -n "$pid" ] || { show_failure "$mode"; die "slurmd for $n is not running (no live pid in $(slurmd_pidfile "$mode" "$n"))"; }
    if [ "$mode" = 4 ]; then
      why=$(check_node_ns "$n" "$pid") || die "$why (daemons left running for inspection; stop with: $0 down)"
    fi
  done
  # slurmctld's main scheduler runs its first cycle ~3 s after start; jobs submitted before
  # that wait for it. Wait here so that `up` means "ready to run jobs at once".
  wait_until 15 sched_ran || warn "slurmctld's scheduler has not run yet (first job may start late)"
  local conf
  conf=$(timeout 5 scontrol show config) || die "scontrol show config failed"
  grep -qE "^Epilog +=  *$EPILOG_BIN\$" <<<"$conf" \
    || die "scontrol show config does not show Epilog=$EPILOG_BIN"
  log "up: $mode node(s) idle: $names ($(since "$t0") s)"
  if [ "$mode" = 4 ]; then
    log "each node has private jobscope dirs (own mount namespace), backed by $NODE_DIRS_ROOT/<node>/{lib,spool,log,run,live}"
  fi
}

# ---------------------------------------------------------------- status
pid_or_not() { if [ -n "$1" ]; then echo "pid $1"; else echo "NOT RUNNING"; fi; }

cmd_status() {
  local mode pid n rc=0 ctld why
  mode=$(current_mode)
  ctld=$(live_pid "$CTLD_PID" slurmctld)
  if [ -z "$mode" ] && [ -z "$ctld" ]; then
    echo "cluster: down"
    for n in slurmctld slurmd; do
      pid=$(pids_named "$n")
      [ -z "$pid" ] || echo "  note: a $n not started by cluster.sh is running: pid $pid"
    done
    rc=3
  else
    echo "cluster: ${mode:-?}-node mode (node names: $(node_names "${mode:-1}"))"
    echo "  slurmctld: $(pid_or_not "$ctld")"; [ -n "$ctld" ] || rc=1
    for n in $(node_names "${mode:-1}"); do
      pid=$(live_pid "$(slurmd_pidfile "${mode:-1}" "$n")" slurmd)
      echo "  slurmd $n: $(pid_or_not "$pid")"; [ -n "$pid" ] || rc=1
      if [ "$mode" = 4 ] && [ -n "$pid" ] && [ "$(id -u)" = 0 ]; then
        if why=$(check_node_ns "$n" "$pid"); then
          echo "    own mount namespace, private jobscope dirs in $(node_dir "$n")"
        else
          echo "    NOT ISOLATED: $why"; rc=1
        fi
      fi
    done
    pid=$(live_pid /run/munge/munged.pid munged)
    echo "  munged: $(pid_or_not "$pid")"
    if [ -n "$ctld" ] && ctld_up; then
      timeout 5 sinfo -N -o '  %12N %10P %8T %5c %8m %G' || true
      timeout 5 scontrol show config | grep -E '^(ClusterName|Epilog|PlugStackConfig|ProctrackType|TaskPlugin) ' | sed 's/^/  /' || true
    else
      echo "  slurmctld does not answer"; rc=1
    fi
  fi
  echo "installed:"
  for n in "$PLUGIN_SO" "$CLI_BIN" "$EPILOG_BIN" "$JS_CONFIG" "$FAKE_NVML_SO"; do
    if [ ! -e "$n" ]; then echo "  $n: missing"
    elif grep -q "$PLACEHOLDER_MARK" "$n" 2>/dev/null; then echo "  $n: PLACEHOLDER (run: $0 install)"
    else echo "  $n: $(date -r "$n" '+%F %T')"; fi
  done
  if [ -f "$PLUGSTACK_D/jobscope.conf" ]; then
    echo "  $PLUGSTACK_D/jobscope.conf: $(grep -v '^[[:space:]]*#' "$PLUGSTACK_D/jobscope.conf" | tr '\n' ' ')"
  else
    echo "  $PLUGSTACK_D/jobscope.conf: missing"
  fi
  return $rc
}

# ---------------------------------------------------------------- install
# The packaged files (packaging/build-debs.sh, plugin/Cargo.toml and epilog/Cargo.toml [package.metadata.deb]).
PKG_PLUGIN_SO=/usr/lib/x86_64-linux-gnu/slurm-wlm/jobscope_spank.so
PKG_CLI_BIN=/usr/bin/jobscope
PKG_EPILOG_BIN=/usr/sbin/jobscope-epilog

# install_packages DIR: apt installs DIR's jobscope .debs and points the test cluster's paths
# (slurm.conf's Epilog=, the plugstack line, the tests' binaries) at the packaged files, so the
# cluster tests run what the packages installed. Conffiles the test cluster rewrites
# (jobscope.toml, the plugstack line) are kept on upgrade (confold).
install_packages() {
  local dir=$1 debs=() d
  for d in "$dir"/jobscope_*.deb "$dir"/jobscope-spank-slurm*.deb; do
    [ -f "$d" ] && debs+=("$(cd "$(dirname "$d")" && pwd)/$(basename "$d")")
  done
  [ "${#debs[@]}" -eq 2 ] || die "expected the jobscope and jobscope-spank-slurm .debs in $dir (found ${#debs[@]}): run packaging/build-debs.sh"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --reinstall --allow-downgrades \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "${debs[@]}" \
    || die "apt-get install ${debs[*]} failed"
  for f in "$PKG_PLUGIN_SO" "$PKG_CLI_BIN" "$PKG_EPILOG_BIN"; do
    dpkg -S "$f" >/dev/null 2>&1 || die "$f is not from a package after the install"
  done
  install -d -m 0755 "$(dirname "$PLUGIN_SO")" "$(dirname "$CLI_BIN")" "$(dirname "$EPILOG_BIN")"
  ln -sfn "$PKG_PLUGIN_SO" "$PLUGIN_SO"
  ln -sfn "$PKG_CLI_BIN" "$CLI_BIN"
  ln -sfn "$PKG_EPILOG_BIN" "$EPILOG_BIN"
  ln -sfn /usr/sbin/jobscope-kernel /usr/local/sbin/jobscope-kernel
  log "installed ${debs[*]}; $PLUGIN_SO $CLI_BIN $EPILOG_BIN link to the packaged files"
}

cmd_install() {
  need_root
  local rel f missing=() tmp packages= demo=0
  while [ $# -gt 0 ]; do
    case "$1" in
      --packages) [ -n "${2:-}" ] || die "install --packages needs a directory"; packages=$2; shift 2 ;;
      --demo) demo=1; shift ;;
      *) die "install takes no arguments but --packages DIR and --demo" ;;
    esac
  done
  rel=${CARGO_TARGET_DIR:-$REPO/target}/release
  if [ -n "$packages" ]; then
    install_packages "$packages"
  else
    for f in libjobscope_spank.so jobscope jobscope-epilog jobscope-kernel; do
      [ -f "$rel/$f" ] || missing+=("$rel/$f")
    done
    [ "${#missing[@]}" -eq 0 ] || die "not built: missing ${missing[*]} -- run: cargo build --release --workspace"
    # `install` unlinks the target first (a link to a packaged file too): safe while slurmstepd has
    # the old .so mapped (never cp over it)
    install -D -m 0755 "$rel/libjobscope_spank.so" "$PLUGIN_SO"
    install -D -m 0755 "$rel/jobscope" "$CLI_BIN"
    install -D -m 0755 "$rel/jobscope-epilog" "$EPILOG_BIN"
    install -D -m 0755 "$rel/jobscope-kernel" /usr/local/sbin/jobscope-kernel
    log "installed $PLUGIN_SO $CLI_BIN $EPILOG_BIN /usr/local/sbin/jobscope-kernel"
  fi
  # Test-only: the fault-injection plugin and the fake NVML, from the build in either mode (no
  # package has them). The demo builds neither and has no use for them: not a word about them there.
  if [ "$demo" = 1 ]; then
    :
  elif [ -f "$rel/jobscope_spank_faults.so" ]; then
    install -D -m 0755 "$rel/jobscope_spank_faults.so" "$FAULTS_PLUGIN_SO"
    log "installed $FAULTS_PLUGIN_SO (fault injection, cluster tests only)"
  else
    warn "$rel/jobscope_spank_faults.so not built: the inject= cluster test needs it (cargo build --release --workspace --features jobscope-plugin/fault-injection, then copy target/release/libjobscope_spank.so to that name; tests/run-all.sh does)"
  fi
  # Test-only: the fake NVML of the GPU cluster tests, outside every production and linker path.
  if [ "$demo" = 1 ]; then
    :
  elif [ -f "$rel/libfake_nvml.so" ]; then
    install -D -m 0755 "$rel/libfake_nvml.so" "$FAKE_NVML_SO"
    log "installed $FAKE_NVML_SO (fake NVML, GPU cluster tests only)"
  else
    warn "$rel/libfake_nvml.so not built: the GPU cluster tests need it (cargo build --release --workspace)"
  fi
  if [ "$demo" = 1 ]; then
    :
  elif [ -f "$rel/libfake_dcgm.so" ]; then
    install -D -m 0755 "$rel/libfake_dcgm.so" "$FAKE_DCGM_SO"
    log "installed $FAKE_DCGM_SO (fake DCGM, GPU cluster tests only)"
  else
    warn "$rel/libfake_dcgm.so not built: the DCGM cluster test needs it (cargo build --release --workspace)"
  fi
  if [ -f "$HERE/jobscope.toml" ]; then
    install -D -m 0644 "$HERE/jobscope.toml" "$JS_CONFIG"
    log "installed $JS_CONFIG (from slurm-conf/jobscope.toml)"
  else
    warn "slurm-conf/jobscope.toml not found: $JS_CONFIG not installed (built-in defaults apply)"
  fi
  ensure_plugstack_include
  tmp=$(mktemp "$PLUGSTACK_D/.jobscope.conf.XXXXXX")
  printf '%s\n' "$PLUGSTACK_LINE" >"$tmp"
  chmod 0644 "$tmp"
  mv -f "$tmp" "$PLUGSTACK_D/jobscope.conf"
  log "wrote $PLUGSTACK_D/jobscope.conf: $PLUGSTACK_LINE"
  if [ -n "$(live_pid "$CTLD_PID" slurmctld)" ]; then
    log "cluster is running: new job steps load the new plugin and epilog; to reload slurmd too: $0 up --nodes $(m=$(current_mode); echo "${m:-1}")"
  fi
}

# ---------------------------------------------------------------- node-exec, node-dir
cmd_node_exec() {
  need_root
  [ $# -ge 2 ] || die "usage: $0 node-exec NODE CMD..."
  local mode node pid
  mode=$(current_mode)
  [ -n "$mode" ] || die "node-exec: the cluster is down"
  node=$(resolve_node "$mode" "$1")
  shift
  pid=$(live_pid "$(slurmd_pidfile "$mode" "$node")" slurmd)
  [ -n "$pid" ] || die "node-exec: slurmd for $node is not running"
  exec nsenter -t "$pid" -m -- "$@"
}

cmd_node_dir() {
  [ $# -eq 1 ] || die "usage: $0 node-dir NODE"
  local node
  node=$(resolve_node 4 "$1")
  node_dir "$node"
}

# the header comment, up to the first line that is not a comment
usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; }

case "${1:-}" in
  up) shift; cmd_up "$@" ;;
  down) shift; [ $# -eq 0 ] || die "down takes no arguments"; cmd_down ;;
  status) shift; cmd_status ;;
  node-exec) shift; cmd_node_exec "$@" ;;
  node-dir) shift; cmd_node_dir "$@" ;;
  install) shift; cmd_install "$@" ;;
  -h|--help|help) usage ;;
  *) usage >&2; exit 2 ;;
esac
