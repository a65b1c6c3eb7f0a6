#!/bin/bash
# A real PostgreSQL (Debian's postgresql package) for jobscope's PostgreSQL tests, benchmark and
# demo: its own data directory and port, listening on 127.0.0.1 only, run as the `postgres` system
# user. It never touches Debian's own clusters (/var/lib/postgresql, pg_ctlcluster).
#
#   slurm-conf/postgres.sh up [--clean]   start it (initdb on first use); idempotent: a running
#                                         server started by this script is left running
#                                         --clean: stop ours, delete its data, start afresh
#   slurm-conf/postgres.sh down           stop the server this script started (by its PID), and
#                                         nothing else
#   slurm-conf/postgres.sh status         running or not, port, data directory
#   slurm-conf/postgres.sh conninfo       the admin connection string (libpq key=value form,
#                                         without the password) and the password file's path
#
# Env: JOBSCOPE_PG_DIR  (default /var/lib/jobscope-pg-test): everything lives here:
#        data/            PGDATA (postgres:postgres 0700)
#        sock/            its unix socket directory
#        admin.password   password of the superuser role `jobscope_admin` (root 0600)
#        server.pid       the postmaster PID this script started (root 0644)
#        server.log       the server's log
#      JOBSCOPE_PG_PORT (default 15432): below Linux's ephemeral port range (32768-60999), where
#        any outgoing loopback connection (SLURM's RPCs, a test's client) may hold the port for a
#        while and the server cannot bind it; the tests' other servers use 15433-15435
#      JOBSCOPE_PG_MAX_CONNECTIONS (default 50; written at initdb): the transport's test of a
#        cluster's jobs ending together runs a server with 10
# Authentication: scram-sha-256 over TCP on 127.0.0.1 only (pg_hba.conf has nothing else), so the
# row-level-security tests log in as real roles with real passwords.
set -euo pipefail
# A server started from here must not inherit the caller's file descriptors (a held flock, a
# test's pipe): close inherited ones, as slurm-conf/cluster.sh does for its daemons.
for fd in /proc/$$/fd/*; do
  n=${fd##*/}
  if [ "$n" -gt 2 ] 2>/dev/null && [ "$n" != 255 ]; then eval "exec $n>&-" 2>/dev/null || true; fi
done

DIR=${JOBSCOPE_PG_DIR:-/var/lib/jobscope-pg-test}
PORT=${JOBSCOPE_PG_PORT:-15432}
MAX_CONN=${JOBSCOPE_PG_MAX_CONNECTIONS:-50}
DATA=$DIR/data
SOCK=$DIR/sock
PASSFILE=$DIR/admin.password
PIDFILE=$DIR/server.pid
LOG=$DIR/server.log
ADMIN=jobscope_admin
DB=jobscope
PGUSER_OS=postgres

die() { echo "postgres.sh: ERROR: $*" >&2; exit 1; }
log() { echo "postgres.sh: $*"; }

[ "$(id -u)" = 0 ] || die "must run as root"
case "$DIR" in /*) ;; *) die "JOBSCOPE_PG_DIR must be an absolute path: $DIR" ;; esac
case "$PORT" in ''|*[!0-9]*) die "JOBSCOPE_PG_PORT must be a number: $PORT" ;; esac
case "$MAX_CONN" in ''|*[!0-9]*) die "JOBSCOPE_PG_MAX_CONNECTIONS must be a number: $MAX_CONN" ;; esac

# The newest installed server binaries (Debian: /usr/lib/postgresql/<major>/bin).
BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
need_bin() {
  [ -n "$BIN" ] && [ -x "$BIN/postgres" ] ||
    die "PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin (apt-get install postgresql; slurm-conf/install-deps.sh does)"
  id "$PGUSER_OS" >/dev/null 2>&1 || die "system user $PGUSER_OS missing (it comes with the postgresql package)"
}

# as_pg CMD...: run a server binary as the postgres system user, in a directory it can enter.
as_pg() { (cd / && runuser -u "$PGUSER_OS" -- "$@"); }

# The PID in server.pid, if that process is alive and is OUR postmaster (its command line names
# our data directory): never signal a PID that was reused by something else.
our_pid() {
  [ -r "$PIDFILE" ] || return 1
  local pid; pid=$(head -n 1 "$PIDFILE" 2>/dev/null || true)
  case "$pid" in ''|*[!0-9]*) return 1 ;; esac
  [ -r "/proc/$pid/cmdline" ] || return 1
  local cmd; cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)
  case "$cmd" in *postgres*"-D $DATA"*) echo "$pid" ;; *) return 1 ;; esac
}

stop_ours() {
  local pid
  if ! pid=$(our_pid); then
    if [ -e "$PIDFILE" ]; then
      log "server.pid names no running server of ours: removing it"
      rm -f "$PIDFILE"
    fi
    if [ -r "$DATA/postmaster.pid" ]; then
      local other; other=$(head -n 1 "$DATA/postmaster.pid" 2>/dev/null || true)
      [ -n "$other" ] && [ -d "/proc/$other" ] &&
        log "a postmaster (PID $other) runs on $DATA that this script did not start: left alone"
    fi
    return 0
  fi
  # SIGINT = "fast" shutdown: sessions are disconnected, committed work is kept.
  kill -INT "$pid"
  local i
  for i in $(seq 1 300); do
    [ -d "/proc/$pid" ] || break
    sleep 0.1
  done
  [ -d "/proc/$pid" ] && die "server PID $pid still running 30 s after SIGINT"
  rm -f "$PIDFILE"
  log "stopped (PID $pid)"
}

init_cluster() {
  install -d -m 0755 -o root -g root "$DIR"
  install -d -m 0700 -o "$PGUSER_OS" -g "$PGUSER_OS" "$DATA"
  install -d -m 0755 -o "$PGUSER_OS" -g "$PGUSER_OS" "$SOCK"
  if [ ! -s "$PASSFILE" ]; then
    (umask 077 && head -c 24 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' >"$PASSFILE")
  fi
  chmod 0600 "$PASSFILE"
  # initdb reads the password from a file the postgres user can read: a private copy, removed after.
  local tmp; tmp=$(mktemp -p "$DIR" .pw.XXXXXX)
  cat "$PASSFILE" >"$tmp"
  chown "$PGUSER_OS:$PGUSER_OS" "$tmp"
  chmod 0600 "$tmp"
  as_pg "$BIN/initdb" -D "$DATA" -U "$ADMIN" --pwfile="$tmp" --auth=scram-sha-256 \
    --encoding=UTF8 --locale=C.UTF-8 >"$DIR/initdb.log" 2>&1 || {
      rm -f "$tmp"; cat "$DIR/initdb.log" >&2; die "initdb failed"; }
  rm -f "$tmp"
  # Loopback TCP with passwords, nothing else (no local/peer lines: every client is a real role).
  cat >"$DATA/pg_hba.conf" <<EOF
# written by jobscope slurm-conf/postgres.sh: loopback only, password (scram-sha-256) only
host all all 127.0.0.1/32 scram-sha-256
EOF
  cat >>"$DATA/postgresql.conf" <<EOF

# --- jobscope slurm-conf/postgres.sh ---
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$SOCK'
password_encryption = 'scram-sha-256'
# a test/demo server on a small machine
max_connections = $MAX_CONN
shared_buffers = 256MB
work_mem = 64MB
max_parallel_workers_per_gather = 2
EOF
  chown "$PGUSER_OS:$PGUSER_OS" "$DATA/pg_hba.conf"
  log "initialised $DATA (superuser role $ADMIN, password in $PASSFILE)"
}

psql_admin() {
  PGPASSWORD=$(cat "$PASSFILE") "$BIN/psql" -X -q -v ON_ERROR_STOP=1 \
    -h 127.0.0.1 -p "$PORT" -U "$ADMIN" "$@"
}

up() {
  need_bin
  local clean=0
  case "${1:-}" in "") ;; --clean) clean=1 ;; *) die "unknown argument to up: $1" ;; esac
  if [ "$clean" = 1 ]; then
    stop_ours
    if [ -d "$DATA" ] && [ -r "$DATA/postmaster.pid" ] &&
       [ -d "/proc/$(head -n 1 "$DATA/postmaster.pid")" ]; then
      die "another server runs on $DATA: not deleting it"
    fi
    rm -rf "$DATA" "$SOCK" "$PIDFILE"
  fi
  local pid
  if pid=$(our_pid); then
    log "already running (PID $pid) on 127.0.0.1:$PORT, data $DATA"
    return 0
  fi
  [ -s "$DATA/PG_VERSION" ] || init_cluster
  install -d -m 0755 -o "$PGUSER_OS" -g "$PGUSER_OS" "$SOCK"
  touch "$LOG" && chown "$PGUSER_OS:$PGUSER_OS" "$LOG"
  # pg_ctl -w waits until the server accepts connections; setsid so it outlives our session.
  as_pg setsid "$BIN/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 -o "-p $PORT" start >/dev/null ||
    { tail -n 20 "$LOG" >&2; die "server did not start (log: $LOG)"; }
  pid=$(head -n 1 "$DATA/postmaster.pid")
  echo "$pid" >"$PIDFILE"
  chmod 0644 "$PIDFILE"
  our_pid >/dev/null || die "started PID $pid but it does not look like our server"
  if [ "$(psql_admin -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = '$DB'")" != 1 ]; then
    psql_admin -d postgres -c "CREATE DATABASE $DB"
  fi
  log "running (PID $pid) on 127.0.0.1:$PORT, data $DATA, database $DB"
}

status() {
  local pid
  if pid=$(our_pid); then
    echo "running: PID $pid, 127.0.0.1:$PORT, data $DATA, log $LOG"
  else
    echo "not running (data ${DATA}$([ -s "$DATA/PG_VERSION" ] || echo ', not initialised'))"
    return 3
  fi
}

case "${1:-}" in
  up) shift; up "$@" ;;
  down) need_bin; stop_ours ;;
  status) status ;;
  conninfo)
    echo "host=127.0.0.1 port=$PORT user=$ADMIN dbname=$DB"
    echo "password_file=$PASSFILE"
    ;;
  -h|--help|"") sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; [ -n "${1:-}" ] ;;
  *) die "unknown command: $1 (up|down|status|conninfo)" ;;
esac
