# Process helpers shared by the test clusters' scripts (slurm-conf/cluster.sh for 22.05,
# slurm-conf/trixie/cluster.sh for 24.11). Sourced, not run; the sourcing script defines log and warn.

now()  { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# pid from a pid file if that process is alive and is `comm`; empty otherwise
live_pid() {
  local pf=$1 comm=$2 pid
  [ -s "$pf" ] || return 0
  pid=$(tr -dc '0-9' <"$pf")
  [ -n "$pid" ] || return 0
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$comm" ] && alive "$pid" && echo "$pid"
  return 0
}

# alive = exists and is not a zombie (our daemons are reparented to PID 1, which may reap late)
alive() {
  local st
  st=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  st=${st##*) }
  [ "${st%% *}" != Z ]
}

# pids of running processes named exactly `comm` (detection only; we never kill by name)
pids_named() {
  local c p out=""
  for c in /proc/[0-9]*/comm; do
    [ "$(cat "$c" 2>/dev/null)" = "$1" ] || continue
    p=${c#/proc/}; p=${p%/comm}
    alive "$p" && out+="$p "
  done
  echo "${out% }"
}

# stop the process of a pid file (TERM, wait, KILL as a last resort); always removes the file
stop_pidfile() {
  local pf=$1 comm=$2 pid i t
  [ -e "$pf" ] || return 0
  pid=$(live_pid "$pf" "$comm")
  if [ -z "$pid" ]; then
    log "removing stale pid file $pf"
    rm -f "$pf"
    return 0
  fi
  t=$(now)
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 200); do alive "$pid" || break; sleep 0.1; done
  if alive "$pid"; then
    warn "$comm (pid $pid) still running 20 s after SIGTERM; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    for i in $(seq 1 50); do alive "$pid" || break; sleep 0.1; done
  fi
  log "stopped $comm (pid $pid, $(since "$t") s)"
  rm -f "$pf"
}

wait_until() {  # wait_until <timeout_s> <command...>: poll every 0.2 s
  local end=$(( $(date +%s) + $1 )); shift
  until "$@"; do
    [ "$(date +%s)" -lt "$end" ] || return 1
    sleep 0.2
  done
}
