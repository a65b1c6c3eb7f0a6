#!/bin/sh
# Epilog= of the jobscope VM cluster (slurm-conf/vm/vm.sh writes it into the guest's /etc/slurm):
# records what the Epilog sees (its environment, and what squeue/scontrol say at that moment) into
# the share's epilog/ directory while guest/capture.sh asks for it, then runs jobscope's Epilog if
# it is installed. Always exits 0.
# SLURM starts it as root with no PATH: absolute paths only.
d=/mnt/jobscope/epilog
j=${SLURM_JOB_ID:-unknown}
# Only while guest/capture.sh captures (it creates $d/record): three SLURM commands cost seconds
# of every job's end under software emulation, which the test suites do not need.
if [ -f "$d/record" ]; then
  /usr/bin/env | /usr/bin/sort >"$d/env-$j.txt"
  /usr/bin/squeue --json -t all -j "$j" >"$d/squeue-$j.json" 2>&1
  /usr/bin/scontrol show job -o "$j" >"$d/scontrol-$j.txt" 2>&1
  /usr/bin/scontrol --json show job "$j" >"$d/scontrol-json-$j.json" 2>&1
  /usr/bin/cat /proc/self/cgroup >"$d/cgroup-of-epilog-$j.txt" 2>&1
fi
if [ -x /usr/local/sbin/jobscope-epilog ]; then
  /usr/local/sbin/jobscope-epilog
fi
exit 0
