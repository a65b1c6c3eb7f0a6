#!/bin/bash
# The jobscope TEST cluster on SLURM 24.11: the daemons of Debian 13 (trixie), run from the root
# filesystem slurm-conf/trixie/rootfs.sh builds, with a plain chroot, on loopback, on this Debian 12
# host, in place of (never beside) the host's 22.05 test cluster (slurm-conf/cluster.sh).
#
#   slurm-conf/trixie/cluster.sh up [--nodes 1|2] [--clean] [--cgroup v1|v2]
#   slurm-conf/trixie/cluster.sh down          stop the 24.11 daemons, unmount (the 22.05 cluster stays down)
#   slurm-conf/trixie/cluster.sh status
#   slurm-conf/trixie/cluster.sh build         build the plugin against the rootfs's 24.11 headers into
#                                              target/slurm-24.11 (its own target dir)
#   slurm-conf/trixie/cluster.sh install       install that plugin, and the host's CLI and Epilog
#                                              (target/release), into the rootfs's /usr/local
#   slurm-conf/trixie/cluster.sh install --packages [DIR...]
#                                              instead, apt installs the .debs inside the rootfs: jobscope
#                                              (target/debian) and jobscope-spank-slurm24.11
#                                              (target/slurm-24.11/debian; packaging/build-debs.sh --slurm 24.11),
#                                              and points /usr/local's paths at the packaged files
#   slurm-conf/trixie/cluster.sh run CMD...    run a command inside the rootfs (e.g. run squeue --json)
#
# The same ports, munge socket, cgroup trees, /etc/slurm and jobscope directories as the 22.05
# cluster: run it only while holding the cluster tests' lock (tests/cluster/src/lib.rs ClusterGuard):
#   flock -w 1800 /tmp/jobscope-cluster-tests.lock slurm-conf/trixie/cluster.sh up
# `up` refuses to start while the 22.05 daemons run. `slurm-conf/cluster.sh up` afterwards stops
# these daemons (same pid files) and rewrites /etc/slurm for 22.05.
#
# What the chroot sees of the host (bind mounts, same paths): /proc, /sys (with the cgroup mounts),
# /dev, /run (munged's socket, pid files, jobscope's handover files), /tmp, /home, /etc/slurm (the
# config generated here from slurm-conf/test-cluster/*.in, the plugstack line the tests edit),
# /etc/jobscope, /etc/{passwd,group,shadow,hosts}, /var/{lib,log}/slurm, /var/spool/jobscope,
# /var/lib/jobscope, /var/log/jobscope, /var/mail. The rootfs has its own /usr/local: the plugin
# built against the 24.11 headers, and the jobscope CLI and Epilog built on this host (trixie's
# glibc is newer, so they run there), at the paths the host's 22.05 cluster uses.
set -euo pipefail
for fd in /proc/$$/fd/*; do   # daemons must not inherit a held flock (see slurm-conf/cluster.sh)
  n=${fd##*/}
  if [ "$n" -gt 2 ] 2>/dev/null && [ "$n" != 255 ]; then eval "exec $n>&-" 2>/dev/null || true; fi
done
unset SLURM_CONF

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
TPL=$REPO/slurm-conf/test-cluster
ROOT=$(bash "$HERE/rootfs.sh" path)
HOST=$(hostname -s)
ETC=/etc/slurm
RUNDIR=/run/jobscope-trixie-cluster
CTLD_PID=/run/slurmctld.pid
STATE_SAVE=/var/lib/slurm/slurmctld
STATE_SAVED=/var/lib/slurm/slurmctld.saved-by-24.11   # 22.05's, while 24.11 runs
STATE_24=/var/lib/slurm/slurmctld-24.11                # 24.11's, while 22.05 runs
FIRST_JOB_ID=24110000
LOGDIR=/var/log/slurm
DAEMON_PATH=/usr/sbin:/usr/bin:/sbin:/bin
UP_TIMEOUT=${JOBSCOPE_CLUSTER_UP_TIMEOUT:-60}
PLUGIN_IN_ROOT=$ROOT/usr/local/lib/slurm/jobscope_spank.so
# The fault-injection build of the plugin (cmd_build), for the cluster tests' inject= cases only.
FAULTS_IN_ROOT=$ROOT/usr/local/lib/slurm/jobscope_spank_faults.so
TARGET_24=${JOBSCOPE_TARGET_24_11:-$REPO/target/slurm-24.11}
export PATH="$DAEMON_PATH:${PATH:-}"

log()  { echo "cluster-24.11: $*"; }
warn() { echo "cluster-24.11: WARNING: $*" >&2; }
die()  { echo "cluster-24.11: ERROR: $*" >&2; exit 1; }
# shellcheck source=slurm-conf/lib/proc.sh
. "$HERE/../lib/proc.sh"
need_root() { [ "$(id -u)" = 0 ] || die "must run as root"; }

# in the chroot, with a clean environment
in_root() { chroot "$ROOT" /usr/bin/env -i "PATH=$DAEMON_PATH" LANG=C.UTF-8 "$@"; }

# the root directory of a process (to tell our chrooted daemons from the host's)
proc_root() { readlink "/proc/$1/root" 2>/dev/null || true; }

# ---------------------------------------------------------------- mounts
DIR_BINDS=(/tmp /home /etc/slurm /etc/jobscope /var/lib/slurm /var/log/slurm /var/spool/jobscope
           /var/lib/jobscope /var/log/jobscope /var/mail /run)
FILE_BINDS=(/etc/passwd /etc/group /etc/shadow /etc/hosts)

mounted_under() { awk -v r="$1" '$5 == r || index($5, r "/") == 1 { f = 1 } END { exit !f }' /proc/self/mountinfo; }
is_mount() { awk -v r="$1" '$5 == r { f = 1 } END { exit !f }' /proc/self/mountinfo; }

bind_one() {  # bind_one <host path> [r]: same path inside the rootfs
  local src=$1 dst=$ROOT$1
  is_mount "$dst" && return 0
  if [ -d "$src" ]; then install -d -m 0755 "$dst"; else [ -e "$dst" ] || : >"$dst"; fi
  if [ "${2:-}" = r ]; then mount --rbind "$src" "$dst"; else mount --bind "$src" "$dst"; fi
  # events below the host's mount (e.g. a cgroup mount) must not come back out of the chroot
  mount --make-rslave "$dst"
}

mount_all() {
  local d f
  for d in /var/spool/jobscope /var/lib/jobscope /var/log/jobscope /etc/jobscope /var/mail \
           /var/lib/slurm "$LOGDIR" "$ETC"; do
    [ -d "$d" ] || install -d -m 0755 "$d"
  done
  bind_one /proc
  bind_one /sys r
  bind_one /dev r
  for d in "${DIR_BINDS[@]}"; do bind_one "$d"; done
  for f in "${FILE_BINDS[@]}"; do [ -e "$f" ] && bind_one "$f"; done
  # the fake NVML library of the GPU tests (slurm-conf/cluster.sh install puts it there)
  [ -d /usr/local/lib/jobscope-test ] && bind_one /usr/local/lib/jobscope-test
  return 0
}

umount_all() {
  local m
  # deepest first; lazy only as a last resort (a process still holding a cwd there)
  for m in $(awk -v r="$ROOT" 'index($5, r "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r); do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || warn "cannot unmount $m"
  done
  mounted_under "$ROOT" && die "mounts left under $ROOT: $(awk -v r="$ROOT" 'index($5, r "/") == 1 { print $5 }' /proc/self/mountinfo | tr '\n' ' ')"
  return 0
}

# ---------------------------------------------------------------- config
# The 22.05 templates, with what 24.11 spells differently.
write_conf() {
  local mode=$1 cg=$2 cpus realmem memtotal tmp
  memtotal=$(awk '/^MemTotal:/ { print int($2 / 1024) }' /proc/meminfo)
  realmem=$(( memtotal - 512 ))
  if [ "$mode" = 2 ]; then cpus=$(nproc); [ "$cpus" -ge 2 ] && cpus=2; realmem=$(( realmem / 2 )); else cpus=$(nproc); fi
  tmp=$(mktemp)
  # CryptoType became CredType (cred/munge) in 23.11.
  cat "$TPL/slurm.conf.in" "$TPL/nodes-$mode.conf.in" \
    | sed -e "s/@HOST@/$HOST/g" -e "s/@NNODES@/$mode/g" -e "s/@CPUS@/$cpus/g" -e "s/@REALMEM@/$realmem/g" \
          -e 's/^CryptoType=crypto\/munge/CredType=cred\/munge/' \
          -e 's/SLURM 22.05 on Debian 12/SLURM 24.11 from the trixie rootfs, slurm-conf\/trixie\/cluster.sh/' >"$tmp"
  grep -q '@[A-Z_]*@' "$tmp" && { rm -f "$tmp"; die "unsubstituted @VAR@ in slurm.conf"; }
  printf '\n# 24.11 job ids start far from 22.05 ones (slurm-conf/trixie/cluster.sh)\nFirstJobId=%s\n' "$FIRST_JOB_ID" >>"$tmp"
  install -m 0644 "$tmp" "$ETC/slurm.conf"; rm -f "$tmp"
  if [ "$cg" = v2 ]; then
    # cgroup/v2 without systemd (no dbus here): slurmd makes its own subtree in the unified mount.
    sed -e 's/^CgroupPlugin=.*/CgroupPlugin=cgroup\/v2/' -e '/^CgroupMountpoint=/d' "$TPL/cgroup.conf" >"$ETC/cgroup.conf"
    local mnt=${JOBSCOPE_CGROUP2_MOUNT:-/sys/fs/cgroup/unified}
    printf 'CgroupMountpoint=%s\nIgnoreSystemd=yes\n' "$mnt" >>"$ETC/cgroup.conf"
    # A controller still bound to a v1 hierarchy with cgroups in it cannot move to v2: without
    # memory there, SLURM cannot constrain RAM (docs/slurm-versions.md, cgroup v2).
    if ! grep -qw memory "$mnt/cgroup.controllers" 2>/dev/null; then
      warn "no memory controller in $mnt (controllers: $(cat "$mnt/cgroup.controllers" 2>/dev/null)): ConstrainRAMSpace=no"
      sed -i 's/^ConstrainRAMSpace=.*/ConstrainRAMSpace=no/' "$ETC/cgroup.conf"
    fi
  else
    install -m 0644 "$TPL/cgroup.conf" "$ETC/cgroup.conf"
  fi
  install -m 0644 "$TPL/gres.conf" "$ETC/gres.conf"
  install -m 0755 "$TPL/mailprog.sh" "$ETC/jobscope-test-mailprog.sh"
  install -m 0755 "$TPL/prolog.sh" "$ETC/jobscope-test-prolog.sh"
  install -d -m 0755 "$ETC/plugstack.conf.d"
  [ -f "$ETC/plugstack.conf" ] || printf 'include %s/plugstack.conf.d/*.conf\n' "$ETC" >"$ETC/plugstack.conf"
  log "wrote $ETC/slurm.conf for 24.11 ($mode node(s), cgroup $cg)"
}

# ---------------------------------------------------------------- up/down
node_names() { if [ "$1" = 2 ]; then echo "${HOST}n1 ${HOST}n2"; else echo "$HOST"; fi; }
ctld_up() { local o; o=$(in_root timeout 5 scontrol ping 2>/dev/null) || true; [[ $o == *'is UP'* ]]; }
nodes_idle() {
  local states n st
  states=$(in_root timeout 5 sinfo -h -N -o '%N %T' 2>/dev/null) || return 1
  for n in $1; do st=$(awk -v n="$n" '$1 == n { print $2; exit }' <<<"$states"); [ "$st" = idle ] || return 1; done
}
sched_ran() {
  local n; n=$(in_root timeout 5 sdiag 2>/dev/null | awk -F: '/Total cycles/ && !s { s = 1; print $2 + 0 }') || return 1
  [ "${n:-0}" -ge 1 ]
}
show_failure() {
  local n
  in_root timeout 5 sinfo -h -N -o '%N %T %E' >&2 2>&1 || true
  echo "---- tail $LOGDIR/slurmctld.log" >&2; tail -n 25 "$LOGDIR/slurmctld.log" >&2 2>/dev/null || true
  for n in $LOGDIR/slurmd*.log; do echo "---- tail $n" >&2; tail -n 25 "$n" >&2 2>/dev/null || true; done
}

start_munged() {
  install -d -o munge -g munge -m 0755 /run/munge
  if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then return 0; fi
  env -i "PATH=$DAEMON_PATH" /usr/sbin/runuser -u munge -- /usr/sbin/munged --force
  wait_until 5 sh -c 'munge -n 2>/dev/null | unmunge >/dev/null 2>&1' || die "munged did not start"
  live_pid /run/munge/munged.pid munged >"$RUNDIR/munged.pid"
}

# The rootfs's exim4 (its /usr/sbin/sendmail, slurm-conf/trixie/rootfs.sh) runs as Debian-exim,
# which the chroot resolves in the host's /etc/passwd (bind-mounted): its uid there need not be
# the one the rootfs's dpkg gave it, so its spool and log directories are given to the host's.
exim_owners() {
  [ -d "$ROOT/var/spool/exim4" ] || return 0
  if ! getent passwd Debian-exim >/dev/null; then
    warn "no Debian-exim user on this host: the rootfs's sendmail cannot deliver (slurm-conf/install-deps.sh installs exim4)"
    return 0
  fi
  in_root chown -R Debian-exim:Debian-exim /var/spool/exim4
  in_root chown Debian-exim:adm /var/log/exim4
}

cmd_up() {
  need_root
  local mode=1 clean=0 cg=v1 t0 n names
  while [ $# -gt 0 ]; do
    case "$1" in
      --nodes) mode=${2:-}; shift 2 ;;
      --clean) clean=1; shift ;;
      --cgroup) cg=${2:-}; shift 2 ;;
      *) die "up: unknown argument '$1'" ;;
    esac
  done
  [ "$mode" = 1 ] || [ "$mode" = 2 ] || die "--nodes must be 1 or 2"
  [ "$cg" = v1 ] || [ "$cg" = v2 ] || die "--cgroup must be v1 or v2"
  [ -x "$ROOT/usr/sbin/slurmctld" ] || die "no 24.11 rootfs at $ROOT: run slurm-conf/trixie/rootfs.sh build"
  t0=$(now)
  [ -s "$RUNDIR/mode" ] && cmd_down >/dev/null
  for n in slurmctld slurmd slurmstepd; do
    local p; for p in $(pids_named "$n"); do
      [ "$(proc_root "$p")" = "$ROOT" ] && die "a 24.11 $n (pid $p) is still running: $0 down"
      die "the 22.05 $n (pid $p) is running: stop it first (slurm-conf/cluster.sh down)"
    done
  done
  install -d -m 0755 "$RUNDIR"
  [ -f "$PLUGIN_IN_ROOT" ] && [ -x "$ROOT/usr/local/sbin/jobscope-epilog" ] \
    || die "jobscope is not installed in the rootfs: run $0 build && $0 install"
  names=$(node_names "$mode")
  write_conf "$mode" "$cg"
  install -d -o slurm -g slurm -m 0755 /var/lib/slurm "$STATE_SAVE" "$LOGDIR"
  for n in $names; do
    if [ "$mode" = 2 ]; then install -d -m 0755 "/var/lib/slurm/slurmd-$n"; else install -d -m 0755 /var/lib/slurm/slurmd; fi
  done
  # 22.05's saved state is not for 24.11 (and back): it is set aside, and 24.11's own is put in
  # its place; `down` swaps them back. So each release keeps its job id sequence, and 24.11's ids
  # start at FirstJobId (write_conf), far from 22.05's: jobscope keys its archive and state by job
  # id, and a reused id reads as a requeued job's later run.
  if [ ! -e "$STATE_SAVED" ]; then
    mv "$STATE_SAVE" "$STATE_SAVED"
    if [ -d "$STATE_24" ] && [ "$clean" = 0 ]; then mv "$STATE_24" "$STATE_SAVE"; fi
    install -d -o slurm -g slurm -m 0755 "$STATE_SAVE"
  fi
  [ "$clean" = 1 ] && find "$STATE_SAVE" -mindepth 1 -delete
  # node states are not kept (a node drained by an earlier test would stay drained)
  rm -f "$STATE_SAVE"/node_state "$STATE_SAVE"/node_state.old
  for f in "$LOGDIR"/slurmctld.log "$LOGDIR"/slurmd.log "$LOGDIR"/slurmd-*.log; do [ -f "$f" ] && mv -f "$f" "$f.1"; done
  # The plugstack line is the host's (the tests edit it); `cluster.sh install --packages` may point
  # it at the packaged 22.05 plugin: run the rootfs's plugin, and give the host its line back at `down`.
  if [ -f "$ETC/plugstack.conf.d/jobscope.conf" ] && [ ! -f "$RUNDIR/jobscope.conf.host" ]; then
    cp -p "$ETC/plugstack.conf.d/jobscope.conf" "$RUNDIR/jobscope.conf.host"
  fi
  printf 'optional /usr/local/lib/slurm/jobscope_spank.so\n' >"$ETC/plugstack.conf.d/jobscope.conf"
  start_munged
  mount_all
  exim_owners
  echo "$mode $cg" >"$RUNDIR/mode"
  in_root /usr/sbin/slurmctld || { show_failure; die "slurmctld failed to start"; }
  wait_until 30 ctld_up || { show_failure; die "slurmctld did not answer within 30 s"; }
  for n in $names; do
    if [ "$mode" = 2 ]; then in_root /usr/sbin/slurmd -N "$n"; else in_root /usr/sbin/slurmd; fi \
      || { show_failure; die "slurmd $n failed to start"; }
  done
  wait_until "$UP_TIMEOUT" nodes_idle "$names" || { show_failure; die "node(s) $names not idle after $UP_TIMEOUT s (left running; $0 down)"; }
  wait_until 15 sched_ran || warn "scheduler has not run yet"
  log "up: SLURM $(in_root scontrol --version | awk '{print $2}'), $mode node(s) idle: $names, cgroup $cg ($(since "$t0") s)"
}

cancel_jobs() {
  [ -n "$(live_pid "$CTLD_PID" slurmctld)" ] || return 0
  local ids i
  ids=$(in_root timeout 10 squeue -h -o %i -t PD,CF,R,S,CG 2>/dev/null | tr '\n' ' ' || true)
  [ -n "${ids// /}" ] || return 0
  log "cancelling jobs: $ids"
  # shellcheck disable=SC2086
  in_root timeout 10 scancel $ids 2>/dev/null || true
  for i in $(seq 1 150); do
    [ -z "$(in_root timeout 5 squeue -h -o %i -t PD,CF,R,S,CG 2>/dev/null || true)" ] && return 0
    sleep 0.2
  done
  warn "jobs still not finished 30 s after scancel"
}

cleanup_cgroups() {
  local name d
  for name in $HOST ${HOST}n1 ${HOST}n2; do
    for d in /sys/fs/cgroup/*/"slurm_$name" /sys/fs/cgroup/"slurm_$name" /sys/fs/cgroup/unified/system.slice/slurmstepd.scope; do
      [ -d "$d" ] || continue
      find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
      [ -d "$d" ] && warn "cgroup still in use, not removed: $d"
    done
  done
  return 0
}

cmd_down() {
  need_root
  local pf p
  if [ -s "$RUNDIR/mode" ] || mounted_under "$ROOT"; then
    cancel_jobs
    for pf in /run/slurmd.pid /run/slurmd-*.pid; do
      [ -e "$pf" ] || continue
      p=$(live_pid "$pf" slurmd)
      if [ -n "$p" ] && [ "$(proc_root "$p")" != "$ROOT" ]; then warn "$pf is the 22.05 slurmd's: left alone"; continue; fi
      stop_pidfile "$pf" slurmd
    done
    p=$(live_pid "$CTLD_PID" slurmctld)
    if [ -z "$p" ] || [ "$(proc_root "$p")" = "$ROOT" ]; then stop_pidfile "$CTLD_PID" slurmctld; fi
    # slurmstepd of 24.11 still running (its job was cancelled above) keep /run etc. busy
    for p in $(pids_named slurmstepd); do
      [ "$(proc_root "$p")" = "$ROOT" ] && warn "24.11 slurmstepd pid $p still running"
    done
    cleanup_cgroups
    umount_all
  fi
  if [ -s "$RUNDIR/munged.pid" ]; then
    p=$(cat "$RUNDIR/munged.pid")
    [ "$(live_pid /run/munge/munged.pid munged)" = "$p" ] && stop_pidfile /run/munge/munged.pid munged
    rm -f "$RUNDIR/munged.pid"
  fi
  if [ -d "$STATE_SAVED" ] && [ -z "$(live_pid "$CTLD_PID" slurmctld)" ]; then
    rm -rf --one-file-system "$STATE_24"
    mv "$STATE_SAVE" "$STATE_24"
    mv "$STATE_SAVED" "$STATE_SAVE"
  fi
  if [ -f "$RUNDIR/jobscope.conf.host" ]; then
    mv -f "$RUNDIR/jobscope.conf.host" "$ETC/plugstack.conf.d/jobscope.conf"
  fi
  rm -f "$RUNDIR/mode"
  log "down"
}

cmd_status() {
  echo "rootfs: $ROOT ($(grep -h '^slurm=' "$ROOT/.jobscope-rootfs-stamp" 2>/dev/null || echo 'not built'))"
  echo "mode: $(cat "$RUNDIR/mode" 2>/dev/null || echo down)"
  echo "slurmctld: $(live_pid "$CTLD_PID" slurmctld || true)"
  echo "plugin: $( [ -f "$PLUGIN_IN_ROOT" ] && echo "$PLUGIN_IN_ROOT" || echo 'NOT INSTALLED')"
  [ -s "$RUNDIR/mode" ] && in_root timeout 5 sinfo -N 2>&1 || true
}

cmd_build() {
  local inc=$ROOT/usr/include t0
  [ -f "$inc/slurm/spank.h" ] || die "no 24.11 headers at $inc (run slurm-conf/trixie/rootfs.sh build)"
  t0=$(now)
  # First with the fault-injection feature, kept as jobscope_spank_faults.so for the cluster tests'
  # inject= cases; then without it, the plugin that is packaged and installed (only the plugin crate
  # is compiled twice).
  ( cd "$REPO" && export JOBSCOPE_SLURM_INCLUDE="$inc" BINDGEN_EXTRA_CLANG_ARGS="-I$inc" \
      CARGO_TARGET_DIR="$TARGET_24" \
    && cargo build --release -p jobscope-plugin --features fault-injection \
    && cp "$TARGET_24/release/libjobscope_spank.so" "$TARGET_24/release/jobscope_spank_faults.so" \
    && cargo build --release -p jobscope-plugin )
  # Only the plugin depends on SLURM's headers: the CLI and the Epilog talk to SLURM through its
  # commands (report/src/slurm/), so the host's build runs in the rootfs unchanged (trixie's C
  # library is newer than bookworm's) and a second build of them, arrow and all, is not needed.
  log "built $TARGET_24/release/libjobscope_spank.so and jobscope_spank_faults.so against $inc ($(since "$t0") s)"
}

# install_faults_plugin: the fault-injection build (cmd_build) into the rootfs, in either install
# mode (no package has it); the cluster tests' inject= cases point a plugstack line at it.
install_faults_plugin() {
  local so=$TARGET_24/release/jobscope_spank_faults.so
  if [ -f "$so" ]; then
    install -D -m 0755 "$so" "$FAULTS_IN_ROOT"
    log "installed $FAULTS_IN_ROOT (fault injection, cluster tests only)"
  else
    warn "$so not built: the inject= cluster test needs it (run $0 build)"
  fi
}

# The packaged files (plugin/Cargo.toml's slurm24.11 variant, epilog/Cargo.toml), as in
# slurm-conf/cluster.sh install --packages for 22.05.
PKG_PLUGIN_SO=/usr/lib/x86_64-linux-gnu/slurm-wlm/jobscope_spank.so
PKG_CLI_BIN=/usr/bin/jobscope
PKG_EPILOG_BIN=/usr/sbin/jobscope-epilog

# install_packages DIR...: apt installs, inside the rootfs, the jobscope .deb and the 24.11 plugin's
# from DIRs, then links the paths the test cluster uses (slurm.conf's Epilog=, the plugstack line,
# the tests' commands, all under /usr/local) to the packaged files, so the 24.11 suite runs what the
# packages installed. Only while the cluster is down: with /etc/slurm and /etc/jobscope bind-mounted,
# dpkg would write the host's.
install_packages() {
  local d f debs=() names=() inroot=/var/cache/jobscope-debs
  mounted_under "$ROOT" && die "install --packages needs the 24.11 cluster down ($0 down): dpkg would write into the host's bind-mounted /etc"
  for d in "$@"; do
    for f in "$d"/jobscope_*.deb "$d"/jobscope-spank-slurm24.11_*.deb; do [ -f "$f" ] && debs+=("$f"); done
  done
  [ "${#debs[@]}" -eq 2 ] || die "expected jobscope_*.deb and jobscope-spank-slurm24.11_*.deb in $* (found ${#debs[@]}: ${debs[*]:-none}): run packaging/build-debs.sh and packaging/build-debs.sh --slurm 24.11"
  rm -rf --one-file-system "${ROOT:?}$inroot"
  install -d -m 0755 "$ROOT$inroot"
  for f in "${debs[@]}"; do install -m 0644 "$f" "$ROOT$inroot/"; names+=("$inroot/$(basename "$f")"); done
  # Every dependency is in the rootfs already (rootfs.sh), so apt downloads nothing (its
  # --no-download refuses local .debs: "Pathname to install is not absolute"). confold: the
  # conffiles the test cluster rewrites stay as they are.
  in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --reinstall --allow-downgrades \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "${names[@]}" \
    || die "apt-get install ${names[*]} inside the rootfs failed"
  rm -rf --one-file-system "${ROOT:?}$inroot"
  [ "$(in_root dpkg-query -S "$PKG_PLUGIN_SO" 2>/dev/null | cut -d: -f1)" = jobscope-spank-slurm24.11 ] \
    || die "$PKG_PLUGIN_SO in the rootfs is not from jobscope-spank-slurm24.11"
  for f in "$PKG_CLI_BIN" "$PKG_EPILOG_BIN"; do
    [ "$(in_root dpkg-query -S "$f" 2>/dev/null | cut -d: -f1)" = jobscope ] || die "$f in the rootfs is not from jobscope"
  done
  install -d -m 0755 "$(dirname "$PLUGIN_IN_ROOT")" "$ROOT/usr/local/bin" "$ROOT/usr/local/sbin"
  # relative links: they resolve the same inside the chroot and from the host
  ln -sfnr "$ROOT$PKG_PLUGIN_SO" "$PLUGIN_IN_ROOT"
  ln -sfnr "$ROOT$PKG_CLI_BIN" "$ROOT/usr/local/bin/jobscope"
  ln -sfnr "$ROOT$PKG_EPILOG_BIN" "$ROOT/usr/local/sbin/jobscope-epilog"
  log "installed in the rootfs: $(in_root dpkg-query -W -f '${Package} ${Version}, ' jobscope jobscope-spank-slurm24.11)/usr/local links to the packaged files"
}

cmd_install() {
  need_root
  if [ "${1:-}" = --packages ]; then
    shift
    local host_target=${CARGO_TARGET_DIR:-$REPO/target}
    if [ $# -eq 0 ]; then set -- "$host_target/debian" "$TARGET_24/debian"; fi
    install_packages "$@"
    install_faults_plugin
    return
  fi
  [ $# -eq 0 ] || die "install takes no arguments but --packages [DIR...]"
  local so=$TARGET_24/release/libjobscope_spank.so
  local b
  local host=${JOBSCOPE_HOST_TARGET:-$REPO/target/release}
  [ -f "$so" ] || die "$so missing: run $0 build"
  for b in "$host/jobscope" "$host/jobscope-epilog"; do
    [ -f "$b" ] || die "$b missing: run cargo build --release --workspace"
  done
  install -d -m 0755 "$(dirname "$PLUGIN_IN_ROOT")" "$ROOT/usr/local/bin" "$ROOT/usr/local/sbin"
  # install (a rename), never cp over a .so a slurmstepd may have mapped
  install -m 0755 "$so" "$PLUGIN_IN_ROOT"
  install -m 0755 "$host/jobscope" "$ROOT/usr/local/bin/jobscope"
  install -m 0755 "$host/jobscope-epilog" "$ROOT/usr/local/sbin/jobscope-epilog"
  log "installed into $ROOT/usr/local: lib/slurm/jobscope_spank.so, bin/jobscope, sbin/jobscope-epilog"
  install_faults_plugin
}

case "${1:-}" in
  up) shift; cmd_up "$@" ;;
  down) cmd_down ;;
  status) cmd_status ;;
  install) shift; cmd_install "$@" ;;
  build) cmd_build ;;
  run) shift; [ -s "$RUNDIR/mode" ] || die "the 24.11 cluster is not up"; in_root "$@" ;;
  *) echo "usage: $0 up [--nodes 1|2] [--clean] [--cgroup v1|v2] | down | status | install [--packages [DIR...]] | build | run CMD..." >&2; exit 2 ;;
esac
