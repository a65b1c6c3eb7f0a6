#!/bin/bash
# Captures what the SLURM adapter parses (report/src/slurm/) from the RUNNING test cluster of the
# release in $1 (22.05: the host's, slurm-conf/cluster.sh; 24.11: slurm-conf/trixie/cluster.sh),
# into report/testdata/slurm-<release>/. Run while holding the cluster tests' lock, as root.
# One job as alice (a name with a space, a comment, --mail-type, a time limit) that exits 3; the
# commands' output is taken while it runs and from inside the Epilog (state COMPLETING), the moment
# the jobscope Epilog asks.
set -euo pipefail
REL=${1:?usage: capture-fixtures.sh 22.05|24.11}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
OUTD=$REPO/report/testdata/slurm-$REL
case "$REL" in
  24.11) RUN=(bash "$HERE/cluster.sh" run) ;;
  22.05) RUN=(env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin) ;;
  *) echo "unknown release $REL" >&2; exit 2 ;;
esac
CAP=/run/jobscope-capture
rm -rf "$CAP"; install -d -m 0755 "$CAP"
# An Epilog that records what the adapter would see, then runs the real one.
cat >/etc/slurm/jobscope-capture-epilog.sh <<'EOS'
#!/bin/sh
d=/run/jobscope-capture
j=$SLURM_JOB_ID
env | sort >"$d/epilog-env-$j.txt"
/usr/bin/squeue --json -t all -j "$j" >"$d/squeue-epilog-$j.json" 2>&1
/usr/bin/scontrol show job -o "$j" >"$d/scontrol-epilog-$j.txt" 2>&1
/usr/bin/scontrol --json show job "$j" >"$d/scontrol-json-epilog-$j.json" 2>&1
exec /usr/local/sbin/jobscope-epilog
EOS
chmod 0755 /etc/slurm/jobscope-capture-epilog.sh
cp /etc/slurm/slurm.conf "$CAP/slurm.conf.orig"
sed -i 's#^Epilog=.*#Epilog=/etc/slurm/jobscope-capture-epilog.sh#' /etc/slurm/slurm.conf
restore() { cp "$CAP/slurm.conf.orig" /etc/slurm/slurm.conf; "${RUN[@]}" scontrol reconfigure || true; rm -f /etc/slurm/jobscope-capture-epilog.sh; }
trap restore EXIT
"${RUN[@]}" scontrol reconfigure
sleep 2
install -d -o alice -g alice /home/alice/capture
id=$("${RUN[@]}" /usr/sbin/runuser -u alice -- /usr/bin/env -i PATH=/usr/bin:/bin HOME=/home/alice \
  sbatch --parsable -D /home/alice/capture -J 'cap ture' --comment 'a comment' --mail-type=END,FAIL \
  --mail-user=alice@localhost -t 5 -c 1 --mem=200M --wrap 'sleep 4; exit 3')
echo "job $id"
for i in $(seq 1 50); do
  st=$("${RUN[@]}" squeue -h -j "$id" -o %T 2>/dev/null || true)
  [ "$st" = RUNNING ] && break; sleep 0.2
done
sleep 1
"${RUN[@]}" squeue --json -t all -j "$id" >"$CAP/squeue-running.json" 2>&1 || true
"${RUN[@]}" scontrol show job -o "$id" >"$CAP/scontrol-running.txt" 2>&1 || true
"${RUN[@]}" scontrol --json show job "$id" >"$CAP/scontrol-json-running.json" 2>&1 || true
for i in $(seq 1 100); do [ -s "$CAP/scontrol-json-epilog-$id.json" ] && break; sleep 0.2; done
sleep 3
"${RUN[@]}" squeue --json -t all -j "$id" >"$CAP/squeue-ended.json" 2>&1 || true
"${RUN[@]}" scontrol show job -o "$id" >"$CAP/scontrol-ended.txt" 2>&1 || true
"${RUN[@]}" scontrol --version >"$CAP/version.txt" 2>&1 || true
install -d "$OUTD"
for f in "$CAP"/*; do
  b=$(basename "$f"); b=${b//-$id/}
  [ "$b" = slurm.conf.orig ] && continue
  cp "$f" "$OUTD/$b"
done
echo "$id" >"$OUTD/job-id.txt"
ls -la "$OUTD"
