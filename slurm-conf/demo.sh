#!/bin/bash
# THE demo (README): a real SLURM job measured by jobscope, from a fresh clone, as root.
#
#   sudo slurm-conf/demo.sh [--down] [--skip-deps]
#
# Installs the dependencies, builds, installs jobscope into the 1-node test cluster, starts
# it, runs a small job as alice (2 cores busy for ~8 s, ~300 MiB of memory), then shows
# `jobscope show <jobid>`, the archived JSON the Epilog wrote under
# /var/lib/jobscope/archive/YYYY/MM/DD/<jobid>.json, and the report mail the Epilog sent to
# alice@localhost (caught by a real SMTP server on 127.0.0.1:2525 that runs for the demo only:
# tests/cluster/smtp/sink.py, python3-aiosmtpd). Last, an audit session as root: `jobscope index
# update`, three `jobscope audit` reports over the archive (docs/audit.md), and the cluster report
# of the archive as one HTML page (`jobscope audit report --html`), whose path it prints.
# The cluster stays up afterwards (explore with squeue, jobscope ...) unless --down is given;
# stop it with: slurm-conf/cluster.sh down
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
cd "$REPO"
ARCHIVE=/var/lib/jobscope/archive
DEMO_DIR=/tmp/jobscope-demo
DEMO_USER=alice

down=0 skip_deps=0
for a in "$@"; do
  case "$a" in
    --down) down=1 ;;
    --skip-deps) skip_deps=1 ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "demo: unknown argument $a" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "demo: must run as root" >&2; exit 1; }
command -v cargo >/dev/null 2>&1 || export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
unset SLURM_CONF

T_DEMO=$(date +%s)
step() { printf '\n==> [%s s] %s\n' "$(( $(date +%s) - T_DEMO ))" "$*"; }
SINK_PID=""
MAIL_DIR=""
stop_sink() {
  [ -n "$SINK_PID" ] || return 0
  kill -TERM "$SINK_PID" 2>/dev/null || true
  wait "$SINK_PID" 2>/dev/null || true
  SINK_PID=""
}
cleanup() {
  stop_sink
  if [ "$down" = 1 ]; then
    step "stopping the cluster"
    bash "$HERE/cluster.sh" down
  fi
}
trap cleanup EXIT

if [ "$skip_deps" = 0 ]; then
  step "installing what the demo uses (slurm-conf/install-deps.sh --demo)"
  bash "$HERE/install-deps.sh" --demo
fi

# What the cluster runs (the plugin, the CLI, the Epilog, the kernel collector), not the whole
# workspace: the test crates and the packaging tool are the test command's. A build of its own
# (target/demo), not optimised and without debug info, for a first look rather than a production
# node: from an empty directory on a 2-core machine it took 168 s, against 337 s optimised at
# level 1 and 470 s for the tests' release build (the compiler's optimisation passes are most of a
# build; at level 0 the build scripts and proc macros are also shared with the crates, as they are
# built at level 0 anyway). A demo run again after the tests neither rebuilds theirs nor is rebuilt
# by them. cluster.sh install takes the binaries from $CARGO_TARGET_DIR/release.
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target/demo}
export CARGO_PROFILE_RELEASE_OPT_LEVEL=0 CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_RELEASE_INCREMENTAL=false
step "building into $CARGO_TARGET_DIR (cargo build --release -p jobscope-plugin -p jobscope-cli -p jobscope-epilog -p jobscope-kernel)"
cargo build --release -p jobscope-plugin -p jobscope-cli -p jobscope-epilog -p jobscope-kernel

# --demo: what the demo runs, without the test suite's own files (fault injection, a fake GPU
# library) or warnings that they were not built.
step "installing jobscope (slurm-conf/cluster.sh install --demo)"
bash "$HERE/cluster.sh" install --demo

step "starting the 1-node test cluster (slurm-conf/cluster.sh up)"
bash "$HERE/cluster.sh" up

# The test cluster's config (slurm-conf/jobscope.toml) mails <user>@localhost via SMTP to
# 127.0.0.1:2525: catch it with a real SMTP server, for the demo only.
step "starting an SMTP server on 127.0.0.1:2525 for the report mail (tests/cluster/smtp/sink.py)"
if (exec 3<>/dev/tcp/127.0.0.1/2525) 2>/dev/null; then
  echo "demo: something already listens on 127.0.0.1:2525; the mail will not be shown" >&2
else
  MAIL_DIR=$(mktemp -d /tmp/jobscope-demo-mail.XXXXXX)
  /usr/bin/python3 "$REPO/tests/cluster/smtp/sink.py" "$MAIL_DIR/in" 127.0.0.1 2525 \
    >"$MAIL_DIR/sink.log" 2>&1 </dev/null &
  SINK_PID=$!
  for _ in $(seq 1 100); do
    grep -q '^ready' "$MAIL_DIR/sink.log" 2>/dev/null && break
    kill -0 "$SINK_PID" 2>/dev/null || break
    sleep 0.1
  done
  if grep -q '^ready' "$MAIL_DIR/sink.log" 2>/dev/null; then
    echo "listening (pid $SINK_PID), messages go to $MAIL_DIR/in"
    # Older undelivered mail (of earlier test runs) goes first, so the demo job's is not held up.
    /usr/local/bin/jobscope mail flush --budget 60 >/dev/null 2>&1 || true
  else
    echo "demo: the SMTP server did not start (python3-aiosmtpd missing?): $(cat "$MAIL_DIR/sink.log")" >&2
    stop_sink
  fi
fi

step "submitting a demo job as $DEMO_USER: 2 cores busy for ~8 s, ~300 MiB of memory"
install -d -m 0755 -o "$DEMO_USER" -g "$(id -gn "$DEMO_USER")" "$DEMO_DIR"
cat >"$DEMO_DIR/demo-job.sh" <<'JOB'
#!/bin/bash
echo "jobscope demo job $SLURM_JOB_ID on $SLURMD_NODENAME with $SLURM_CPUS_ON_NODE CPUs"
# core 1: python holding ~300 MiB and spinning
python3 -c '
import time
buf = bytearray(300 * 1024 * 1024)
for i in range(0, len(buf), 4096):
    buf[i] = 1
end = time.time() + 8
while time.time() < end:
    pass
' &
# core 2: a shell busy loop
timeout 8 sh -c 'while :; do :; done' &
wait
echo "done"
JOB
chown "$DEMO_USER" "$DEMO_DIR/demo-job.sh"
chmod 0755 "$DEMO_DIR/demo-job.sh"
home=$(getent passwd "$DEMO_USER" | cut -d: -f6)
T_SUBMIT=$(date +%s)
J=$(cd "$DEMO_DIR" && runuser -u "$DEMO_USER" -- env -i PATH=/usr/bin:/bin "HOME=$home" \
      sbatch --parsable --job-name=jobscope-demo --cpus-per-task=2 --mem=1G --time=5 \
             --output="$DEMO_DIR/%j.out" "$DEMO_DIR/demo-job.sh")
J=${J%%;*}
echo "job $J submitted"

step "waiting for job $J"
t0=$(date +%s)
while :; do
  st=$(scontrol show job -o "$J" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2 || true)
  case "$st" in
    PENDING|CONFIGURING|RUNNING|COMPLETING|SUSPENDED|"") ;;
    *) break ;;
  esac
  [ $(( $(date +%s) - t0 )) -lt 180 ] || { echo "demo: job $J still $st after 180 s" >&2; exit 1; }
  sleep 0.5
done
echo "job $J: $st after $(( $(date +%s) - t0 )) s"
echo "--- job output ($DEMO_DIR/$J.out)"
cat "$DEMO_DIR/$J.out" 2>/dev/null || true
[ "$st" = COMPLETED ] || echo "demo: WARNING: job ended $st" >&2

rc=0
step "jobscope show $J"
if [ -x /usr/local/bin/jobscope ]; then
  /usr/local/bin/jobscope show "$J" || { rc=1; echo "demo: 'jobscope show $J' failed" >&2; }
else
  rc=1; echo "demo: /usr/local/bin/jobscope is not installed" >&2
fi

step "archived JSON for job $J (under $ARCHIVE)"
json=""
for _ in $(seq 1 50); do
  json=$(find "$ARCHIVE" \( -name "$J.json" -o -name "$J[._-]*.json" \) -type f 2>/dev/null | sort | head -n 1 || true)
  [ -n "$json" ] && break
  sleep 0.2
done
if [ -n "$json" ]; then
  echo "--- $json"
  python3 -m json.tool "$json" 2>/dev/null || cat "$json"
else
  rc=1; echo "demo: no archive JSON for job $J under $ARCHIVE (did the Epilog run? see /var/log/slurm/slurmd.log)" >&2
fi

step "the report mail for job $J (sent by the Epilog to $DEMO_USER@localhost)"
if [ -n "$SINK_PID" ]; then
  # The Epilog delivered it before the job left COMPLETING; allow a moment anyway.
  for _ in $(seq 1 50); do
    grep -lqs "^Message-ID: <jobscope\.[^>]*\.$J\.[0-9]*\.end@" "$MAIL_DIR"/in/*.eml && break
    sleep 0.2
  done
  if ! /usr/bin/python3 - "$MAIL_DIR/in" "$J" <<'PY'
import email, email.policy, glob, re, sys
d, job = sys.argv[1], sys.argv[2]
for f in sorted(glob.glob(d + "/*.eml")):
    m = email.message_from_binary_file(open(f, "rb"), policy=email.policy.default)
    if not re.fullmatch(r"<jobscope\..*\.%s\.\d+\.end@.*>" % job, m["Message-ID"] or ""):
        continue
    print("--- %s" % f)
    for h in ("From", "To", "Subject", "Message-ID"):
        print("%s: %s" % (h, m[h]))
    parts = [p for p in m.walk() if not p.is_multipart()]
    print("Parts: " + ", ".join("%s (%d bytes)" % (p.get_content_type(), len(p.get_payload(decode=True) or b"")) for p in parts))
    print()
    print(m.get_body(preferencelist=("plain",)).get_content(), end="")
    sys.exit(0)
sys.exit("no mail about job %s arrived" % job)
PY
  then
    rc=1; echo "demo: no report mail for job $J (see /var/log/jobscope/epilog.log)" >&2
  fi
  stop_sink
else
  echo "(skipped: no SMTP server for the demo)"
fi

step "an audit session over the archive, as root (docs/audit.md)"
audit() {
  printf '$ jobscope %s\n' "$*"
  /usr/local/bin/jobscope "$@" || { rc=1; echo "demo: 'jobscope $*' failed" >&2; }
  echo
}
if [ -x /usr/local/bin/jobscope ]; then
  audit index update
  audit audit usage --by user,partition --last 7d
  audit audit top --by user --metric core --top 5 --last 7d
  audit audit jobs --user "$DEMO_USER" --since "$T_SUBMIT"
  # the week's cluster report of this archive, as one page with its charts inside
  REPORT_HTML=$DEMO_DIR/cluster-report.html
  rm -f "$REPORT_HTML"
  audit audit report --last 7d --html "$REPORT_HTML"
  [ -s "$REPORT_HTML" ] && echo "the cluster report: open file://$REPORT_HTML in a browser (one self-contained page, nothing fetched)"
fi

if [ "$down" = 0 ]; then
  step "the cluster is still up: try squeue, sinfo, jobscope ...; stop it with: slurm-conf/cluster.sh down"
fi
echo "demo: $(( $(date +%s) - T_DEMO )) s from start to end"
exit "$rc"
