#!/bin/bash
# The guest side of slurm-conf/vm/vm.sh, run as root by the image's boot hook
# (/usr/local/sbin/jobscope-vm-hook) from the 9p share mounted at /mnt/jobscope; its output goes to
# the share's state/agent.log. It
#   1. installs the /etc/slurm the host wrote (share etc/slurm/), records the io choice
#      (config.env) for the slurmd drop-in, starts munge, slurmctld and slurmd (systemd units),
#      waits for the node to be idle and writes state/ready (or state/failed with the reason);
#   2. runs each queue/N.cmd the host puts there (bash, as root), writing out/N.out, out/N.err and
#      then out/N.rc (renamed into place: the host waits for it);
#   3. on queue/poweroff: copies the daemons' logs and the journal to state/logs/, powers off.
set -u
S=/mnt/jobscope
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH LANG=C.UTF-8
log() { echo "agent: [$(cut -d' ' -f1 /proc/uptime)] $*"; }
fail() { log "FAILED: $*"; echo "$*" >"$S/state/failed"; save_logs; exit 1; }
save_logs() {
  mkdir -p "$S/state/logs"
  cp /var/log/slurm/*.log "$S/state/logs/" 2>/dev/null || true
  journalctl -b --no-pager -o short-monotonic >"$S/state/logs/journal.txt" 2>/dev/null || true
}

# shellcheck disable=SC1091
. "$S/config.env"
log "suite $JOBSCOPE_VM_SUITE, io $JOBSCOPE_VM_IO, kernel $(uname -r)"
mkdir -p /run/jobscope-vm
# The repository, read-only at its host path (vm.sh's second 9p share): the cluster test binaries
# and their fixtures (slurm-conf/vm/run-suite.sh).
if [ -n "${JOBSCOPE_VM_REPO:-}" ]; then
  mkdir -p "$JOBSCOPE_VM_REPO"
  mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144 jobscope-repo "$JOBSCOPE_VM_REPO" \
    || log "cannot mount the repository at $JOBSCOPE_VM_REPO"
fi
echo "$JOBSCOPE_VM_IO" >/run/jobscope-vm/io
install -d -m 0755 /etc/slurm /etc/slurm/plugstack.conf.d
for f in "$S"/etc/slurm/*; do install -m "$(stat -c %a "$f")" "$f" /etc/slurm/; done
install -d -o slurm -g slurm -m 0755 /var/lib/slurm /var/lib/slurm/slurmctld /var/log/slurm
install -d -m 0755 /var/lib/slurm/slurmd
systemctl start munge.service || fail "munge did not start"
systemctl start slurmctld.service || fail "slurmctld did not start: $(tail -n 5 /var/log/slurm/slurmctld.log 2>/dev/null)"
systemctl start slurmd.service || fail "slurmd did not start: $(tail -n 5 /var/log/slurm/slurmd.log 2>/dev/null)"
log "daemons started"
for i in $(seq 1 600); do
  st=$(timeout 5 sinfo -h -N -o '%T' 2>/dev/null | head -n1)
  [ "$st" = idle ] && break
  sleep 0.2
done
[ "$st" = idle ] || fail "node not idle after 120 s (state '$st')"
log "node idle"
echo "SLURM $(sinfo -V | awk '{print $2}'), node $JOBSCOPE_VM_NODE idle, uptime $(cut -d' ' -f1 /proc/uptime) s" >"$S/state/ready.tmp"
mv "$S/state/ready.tmp" "$S/state/ready"

while :; do
  if [ -e "$S/queue/poweroff" ]; then
    log "poweroff asked"
    save_logs
    sync
    systemctl poweroff
    exit 0
  fi
  for c in "$S"/queue/*.cmd; do
    [ -f "$c" ] || continue
    n=$(basename "$c" .cmd)
    [ -e "$S/out/$n.rc" ] && continue
    log "run $n: $(head -c 200 "$c" | tail -n +2)"
    bash "$c" >"$S/out/$n.out" 2>"$S/out/$n.err" </dev/null
    echo $? >"$S/out/$n.rc.tmp"
    mv "$S/out/$n.rc.tmp" "$S/out/$n.rc"
    rm -f "$c"
  done
  sleep 0.2
done
