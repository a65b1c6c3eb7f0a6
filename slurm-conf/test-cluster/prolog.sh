#!/bin/sh
# The test cluster's Prolog (slurm-conf/test-cluster/, installed by slurm-conf/cluster.sh up).
# Does nothing, unless a test creates /run/jobscope-test-prolog-sleep holding a number of seconds:
# then the Prolog sleeps that long, so the test can cancel a job while it is in its prolog.
f=/run/jobscope-test-prolog-sleep
if [ -f "$f" ] && [ ! -L "$f" ]; then
  s=$(head -c 8 "$f" | tr -cd '0-9')
  [ -n "$s" ] && [ "$s" -le 120 ] && sleep "$s"
fi
exit 0
