#!/bin/bash
# Runs in the jobscope VM (queued by vm.sh run): installs the SPANK plugin the host put in the
# share (files/jobscope_spank.so, built against this suite's headers), restarts slurmd, runs one
# job as alice, and records whether SLURM loaded the plugin and what it spooled, into
# out/try-plugin/. The jobscope Epilog is not installed, so the spool stays for inspection.
set -u
PATH=/usr/sbin:/usr/bin:/sbin:/bin
S=/mnt/jobscope
O=$S/out/try-plugin
W=/home/alice/try
mkdir -p "$O"
install -d -o alice -g alice "$W"
[ -f "$S/files/jobscope_spank.so" ] || { echo "no files/jobscope_spank.so in the share" >&2; exit 1; }
install -d -m 0755 /usr/local/lib/slurm /etc/slurm/plugstack.conf.d
install -m 0755 "$S/files/jobscope_spank.so" /usr/local/lib/slurm/jobscope_spank.so
echo 'optional /usr/local/lib/slurm/jobscope_spank.so' >/etc/slurm/plugstack.conf.d/jobscope.conf
[ -f "$S/files/jobscope.toml" ] && install -D -m 0644 "$S/files/jobscope.toml" /etc/jobscope/jobscope.toml
systemctl restart slurmd
for i in $(seq 1 300); do [ "$(sinfo -h -N -o %T 2>/dev/null | head -n1)" = idle ] && break; sleep 0.2; done
id=$(runuser -u alice -- env -i PATH=/usr/bin:/bin HOME=/home/alice sbatch --parsable -D "$W" -J 'try plugin' \
     -c 1 --mem=500M -t 5 -o "$W/%j.out" --wrap 'python3 -c "
import time
b = bytearray(64 * 1024 * 1024)
for i in range(0, len(b), 4096): b[i] = 1
end = time.process_time() + 2.0
while time.process_time() < end: pass
"; dd if=/dev/zero of=dd.out bs=1M count=4 oflag=direct 2>/dev/null; sleep 12' 2>"$O/sbatch-stderr.txt")
echo "$id" >"$O/job-id.txt"
for i in $(seq 1 600); do
  st=$(scontrol show job -o "$id" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
  case "$st" in COMPLETED|FAILED|CANCELLED|TIMEOUT|OUT_OF_MEMORY|NODE_FAIL) break ;; esac
  sleep 0.2
done
sleep 2
echo "$st" >"$O/job-state.txt"
cp "$W/$id.out" "$O/job-output.txt" 2>/dev/null || true
grep -i 'jobscope\|incompatible\|spank' /var/log/slurm/slurmd.log >"$O/slurmd-log-grep.txt" 2>&1 || true
journalctl -b --no-pager -o cat 2>/dev/null | grep -i 'jobscope' >"$O/journal-grep.txt" || true
{ ls -laR /var/spool/jobscope 2>&1; } >"$O/spool-listing.txt"
[ -d /var/spool/jobscope ] && tar -C /var/spool -cf "$O/spool.tar" jobscope 2>/dev/null
ls -la /run/jobscope* >"$O/run-listing.txt" 2>&1 || true
echo "job $id: $st"
