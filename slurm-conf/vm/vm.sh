#!/bin/bash
# The jobscope VM test cluster: SLURM on cgroup v2, in a qemu virtual machine booted from the
# image slurm-conf/vm/image.sh builds (trixie: SLURM 24.11; sid: SLURM 26.05). The VM has NO
# network (-nic none); the host drives it through a 9p share: the image's boot hook
# (slurm-conf/vm/image/usr/local/sbin/jobscope-vm-hook) mounts it and runs the agent this script
# copies there (slurm-conf/vm/guest/agent.sh), which starts munge, slurmctld and slurmd with the
# configuration written here and then runs the commands queued by `run`. Root only.
#
#   slurm-conf/vm/vm.sh up SUITE [--io on|off] [--cgroup-conf KEY=VALUE]... [--max-s S]
#                                                           boot, start the cluster, wait until idle
#   slurm-conf/vm/vm.sh run SUITE [--timeout S] CMD...       run CMD (as root, in bash) in the guest;
#                                                           its stdout/stderr/exit status come back
#   slurm-conf/vm/vm.sh down SUITE                          power the guest off (qemu's PID, by pid file)
#   slurm-conf/vm/vm.sh status SUITE
#   slurm-conf/vm/vm.sh share SUITE                         print the host directory shared with the
#                                                           guest (/mnt/jobscope there): put built files
#                                                           under its files/, find results under out/
#
# --io on: the slurmd drop-in baked in the image enables +io +pids in SLURM's slurmstepd scope
#          (a site that wants io.stat per job); off (default): SLURM's own choice (no io, no pids).
# --cgroup-conf: a line added to the guest's cgroup.conf (e.g. 26.05's CgroupJobIdPaths=yes).
# --max-s: qemu is started under `timeout` and killed after this many seconds whatever happens
#          (default 3600): a forgotten VM never outlives a CI run.
#
# Guest: 2 vCPUs, 4 GiB, software emulation (TCG) unless /proc/cpuinfo shows vmx or svm (then
# KVM); kernel command line root=/dev/vda rw console=ttyS0 systemd.unified_cgroup_hierarchy=1
# psi=1; the disk is snapshot=on, so every boot starts from the image as built (job ids from 1).
# The repository is shared read-only too, mounted at its own path in the guest (the cluster test
# binaries find their fixtures and the built files there; slurm-conf/vm/run-suite.sh).
# qemu runs under nice -n 19. Files: /run/jobscope-vm/SUITE/ (qemu.pid, console.log, timings),
# the share in $JOBSCOPE_VM_SHARE_TOP (default /var/tmp/jobscope-vm)/SUITE/share.
set -euo pipefail
unset SLURM_CONF

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
TPL=$REPO/slurm-conf/test-cluster
RUN_TOP=/run/jobscope-vm
SHARE_TOP=${JOBSCOPE_VM_SHARE_TOP:-/var/tmp/jobscope-vm}
NODE=vm                       # image.sh's NODE
GUEST_CPUS=2
GUEST_MEM_MB=4096
GUEST_REALMEM=3072            # what slurm.conf gives the node (the guest keeps the rest)
# qemu start to node idle: 75-150 s measured on a 2-core host compiling meanwhile, and more than
# 300 s once under load 18 (docs/vm.md, Timings)
BOOT_TIMEOUT=${JOBSCOPE_VM_BOOT_TIMEOUT:-300}

log()  { echo "vm: $*"; }
warn() { echo "vm: WARNING: $*" >&2; }
die()  { echo "vm: ERROR: $*" >&2; exit 1; }
# shellcheck source=slurm-conf/lib/proc.sh
. "$HERE/../lib/proc.sh"
need_root() { [ "$(id -u)" = 0 ] || die "must run as root"; }
suite_ok() { case "${1:-}" in trixie|sid) ;; *) die "suite must be trixie or sid" ;; esac; }

setup_paths() {
  SUITE=$1
  IMG=$(bash "$HERE/image.sh" path "$SUITE")
  RUNDIR=$RUN_TOP/$SUITE
  PIDF=$RUNDIR/qemu.pid
  SHARE=$SHARE_TOP/$SUITE/share
}

qemu_pid() { live_pid "$PIDF" qemu-system-x86; }   # comm is cut to 15 characters

# ---------------------------------------------------------------- guest configuration
# /etc/slurm for the guest, from the test cluster's templates (slurm-conf/test-cluster/), with
# what differs in the VM: one node named vm, cgroup/v2, task/cgroup + task/affinity, CredType
# (23.11+), and an Epilog that records its environment into the share before running jobscope's.
write_conf() {
  local d=$SHARE/etc/slurm
  install -d -m 0755 "$d"
  cat "$TPL/slurm.conf.in" "$TPL/nodes-1.conf.in" \
    | sed -e "s/@HOST@/$NODE/g" -e "s/@NNODES@/1/g" -e "s/@CPUS@/$GUEST_CPUS/g" -e "s/@REALMEM@/$GUEST_REALMEM/g" \
          -e 's/^CryptoType=crypto\/munge/CredType=cred\/munge/' \
          -e 's/^TaskPlugin=.*/TaskPlugin=task\/cgroup,task\/affinity/' \
          -e 's#^Epilog=.*#Epilog=/etc/slurm/jobscope-vm-epilog.sh#' \
          -e "s/SLURM 22.05 on Debian 12/SLURM $SUITE in the jobscope VM, slurm-conf\/vm\/vm.sh/" >"$d/slurm.conf"
  grep -q '@[A-Z_]*@' "$d/slurm.conf" && die "unsubstituted @VAR@ in slurm.conf"
  sed -e 's/^CgroupPlugin=.*/CgroupPlugin=cgroup\/v2/' -e '/^CgroupMountpoint=/d' \
      -e 's/^# Debian 12 VMs.*/# The jobscope VM boots cgroup v2 only (systemd.unified_cgroup_hierarchy=1): job cgroups are/' \
      -e "s|^# /sys/fs/cgroup/{memory.*|# /sys/fs/cgroup/system.slice/${NODE}_slurmstepd.scope/job_<id>/step_*/...|" \
      "$TPL/cgroup.conf" >"$d/cgroup.conf"
  install -m 0644 "$TPL/gres.conf" "$d/gres.conf"
  install -m 0755 "$TPL/mailprog.sh" "$d/jobscope-test-mailprog.sh"
  install -m 0755 "$TPL/prolog.sh" "$d/jobscope-test-prolog.sh"
  install -m 0755 "$HERE/guest/jobscope-vm-epilog.sh" "$d/jobscope-vm-epilog.sh"
  printf 'include /etc/slurm/plugstack.conf.d/*.conf\n' >"$d/plugstack.conf"
}

prepare_share() {
  local io=$1 l; shift
  # the share is ours alone: remove it whole (never follow anything in it)
  if [ -e "$SHARE" ]; then rm -rf --one-file-system "$SHARE"; fi
  install -d -m 0755 "$SHARE" "$SHARE/guest" "$SHARE/state" "$SHARE/queue" "$SHARE/out" "$SHARE/files" "$SHARE/epilog"
  chmod 0777 "$SHARE/out"   # jobs (as alice) may write results there too
  install -m 0755 "$HERE"/guest/*.sh "$SHARE/guest/"
  write_conf
  for l in "$@"; do printf '%s\n' "$l" >>"$SHARE/etc/slurm/cgroup.conf"; done
  printf 'JOBSCOPE_VM_SUITE=%s\nJOBSCOPE_VM_IO=%s\nJOBSCOPE_VM_NODE=%s\nJOBSCOPE_VM_REPO=%q\n' "$SUITE" "$io" "$NODE" "$REPO" >"$SHARE/config.env"
}

# ---------------------------------------------------------------- up/down
accel_args() {
  if grep -qwE 'vmx|svm' /proc/cpuinfo && [ -w /dev/kvm ]; then
    echo "-accel kvm -cpu host"
  else
    # /dev/kvm may exist without hardware virtualization (no vmx/svm): a stock kernel then fails
    # ("failed to set MSR 0x10a"). Software emulation works everywhere.
    echo "-accel tcg,thread=multi -cpu max"
  fi
}

cmd_up() {
  need_root
  local io=off max_s=3600 t0 accel p cgextra=()
  while [ $# -gt 0 ]; do
    case "$1" in
      --io) io=${2:-}; shift 2 ;;
      --cgroup-conf) [[ ${2:-} =~ ^[A-Za-z]+=[^[:space:]]*$ ]] || die "--cgroup-conf takes KEY=VALUE"; cgextra+=("$2"); shift 2 ;;
      --max-s) max_s=${2:-}; shift 2 ;;
      *) die "up: unknown argument '$1'" ;;
    esac
  done
  [ "$io" = on ] || [ "$io" = off ] || die "--io must be on or off"
  [[ $max_s =~ ^[0-9]+$ ]] || die "--max-s must be a number of seconds"
  command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 missing: apt-get install -y --no-install-recommends qemu-system-x86"
  for f in disk.img vmlinuz initrd.img; do
    [ -f "$IMG/$f" ] || die "no $IMG/$f: run slurm-conf/vm/image.sh build $SUITE"
  done
  p=$(qemu_pid)
  [ -z "$p" ] || die "the $SUITE VM is already running (qemu pid $p): $0 down $SUITE"
  install -d -m 0755 "$RUNDIR"
  rm -f "$PIDF" "$RUNDIR/console.log" "$RUNDIR/qemu.out"
  prepare_share "$io" "${cgextra[@]}"
  accel=$(accel_args)
  t0=$(now)
  echo "$t0" >"$RUNDIR/started"
  # setsid: qemu is not in our process group (a ^C of the caller does not reach it); timeout
  # bounds its life; -pidfile records qemu's own pid, by which down stops it.
  # shellcheck disable=SC2086
  setsid nice -n 19 timeout -k 10 "$max_s" qemu-system-x86_64 $accel -smp "$GUEST_CPUS" -m "$GUEST_MEM_MB" \
    -nographic -serial "file:$RUNDIR/console.log" -monitor none -nic none \
    -kernel "$IMG/vmlinuz" -initrd "$IMG/initrd.img" \
    -append 'root=/dev/vda rw console=ttyS0 systemd.unified_cgroup_hierarchy=1 psi=1 quiet' \
    -drive "file=$IMG/disk.img,if=virtio,format=raw,snapshot=on" \
    -virtfs "local,path=$SHARE,mount_tag=jobscope,security_model=none,id=jobscope" \
    -virtfs "local,path=$REPO,mount_tag=jobscope-repo,security_model=none,readonly=on,id=repo" \
    -pidfile "$PIDF" \
    </dev/null >"$RUNDIR/qemu.out" 2>&1 &
  LAUNCHER=$!   # timeout's pid (setsid execs in a background child): gone = qemu gone
  log "booting $SUITE ($accel, io $io, at most $max_s s)"
  if ! wait_until "$BOOT_TIMEOUT" up_done; then
    show_failure
    cmd_down >/dev/null 2>&1 || true
    die "the $SUITE VM was not ready within $BOOT_TIMEOUT s"
  fi
  if [ -f "$SHARE/state/failed" ]; then
    show_failure
    cmd_down >/dev/null 2>&1 || true
    die "the guest could not start the cluster: $(cat "$SHARE/state/failed")"
  fi
  printf 'boot_to_hook_s=%s\nboot_to_ready_s=%s\n' \
    "$(awk -v a="$t0" -v b="$(stat -c %.9Y "$SHARE/state/hook-started")" 'BEGIN { printf "%.1f", b - a }')" \
    "$(since "$t0")" >"$RUNDIR/timings"
  log "up: $SUITE, $(cat "$SHARE/state/ready") ($(since "$t0") s; qemu pid $(qemu_pid))"
}

# the guest is ready (or failed, or qemu died)
up_done() {
  [ -f "$SHARE/state/ready" ] || [ -f "$SHARE/state/failed" ] && return 0
  if ! alive "$LAUNCHER" || { [ -s "$PIDF" ] && [ -z "$(qemu_pid)" ]; }; then
    echo "qemu exited: $(tr '\n' ' ' <"$RUNDIR/qemu.out" 2>/dev/null)" >"$SHARE/state/failed"; return 0
  fi
  return 1
}

show_failure() {
  echo "---- qemu: $(cat "$RUNDIR/qemu.out" 2>/dev/null)" >&2
  echo "---- tail console.log" >&2; tail -n 30 "$RUNDIR/console.log" >&2 2>/dev/null || true
  echo "---- tail agent.log" >&2; tail -n 30 "$SHARE/state/agent.log" >&2 2>/dev/null || true
}

cmd_down() {
  need_root
  local p i
  p=$(qemu_pid)
  if [ -z "$p" ]; then rm -f "$PIDF"; log "$SUITE: not running"; return 0; fi
  # the agent saves the daemons' logs into the share, then powers off
  [ -d "$SHARE/queue" ] && : >"$SHARE/queue/poweroff"
  for i in $(seq 1 300); do alive "$p" || break; sleep 0.2; done
  if alive "$p"; then
    warn "qemu (pid $p) still running 60 s after poweroff was asked; SIGTERM"
    kill -TERM "$p" 2>/dev/null || true
    for i in $(seq 1 50); do alive "$p" || break; sleep 0.2; done
    if alive "$p"; then kill -KILL "$p" 2>/dev/null || true; fi
  fi
  rm -f "$PIDF"
  log "$SUITE: down"
}

cmd_status() {
  local p
  p=$(qemu_pid)
  echo "image: $IMG ($(grep -h '^slurm=' "$IMG/stamp" 2>/dev/null || echo 'not built'))"
  echo "qemu: ${p:-not running}"
  echo "share: $SHARE"
  [ -f "$RUNDIR/timings" ] && cat "$RUNDIR/timings"
  if [ -n "$p" ] && [ -f "$SHARE/state/ready" ]; then cmd_run --timeout 30 /usr/bin/sinfo -N || true; fi
}

# ---------------------------------------------------------------- run
# Queues CMD as share/queue/N.cmd; the agent runs it (bash, as root, cwd /root) and writes
# out/N.out, out/N.err, then out/N.rc.
cmd_run() {
  local timeout=600 n f q
  if [ "${1:-}" = --timeout ]; then timeout=${2:-}; shift 2; fi
  [ $# -gt 0 ] || die "run: no command"
  [ -n "$(qemu_pid)" ] && [ -f "$SHARE/state/ready" ] || die "the $SUITE VM is not up ($0 up $SUITE)"
  n=$(date +%s%N)$$
  q=$SHARE/queue/$n
  { printf 'cd /root\n'; printf '%q ' "$@"; printf '\n'; } >"$q.tmp"
  mv "$q.tmp" "$q.cmd"
  f=$SHARE/out/$n
  if ! wait_until "$timeout" test -f "$f.rc"; then
    die "run: no answer from the guest within $timeout s (command left running there)"
  fi
  cat "$f.out"
  cat "$f.err" >&2
  return "$(cat "$f.rc")"
}

# One compound command, parsed whole before it runs, ending in exit: an edit of this file while a
# `run` waits does not make bash read on into the new text.
{
case "${1:-}" in
  up|down|run|status|share) verb=$1; suite_ok "${2:-}"; setup_paths "$2"; shift 2 ;;
  *) echo "usage: $0 up SUITE [--io on|off] [--cgroup-conf KEY=VALUE]... [--max-s S] | run SUITE [--timeout S] CMD... | down SUITE | status SUITE | share SUITE  (SUITE: trixie|sid)" >&2; exit 2 ;;
esac
case "$verb" in
  up) cmd_up "$@" ;;
  down) cmd_down ;;
  status) cmd_status ;;
  share) echo "$SHARE" ;;
  run) cmd_run "$@" ;;
esac
exit $?
}
