#!/bin/bash
# Captures, from the VM cluster on cgroup v2, what SLURM and the kernel show for test jobs
# (slurm-conf/vm/guest/capture.sh), into slurm-conf/vm/captured/SUITE/io-off/ and io-on/, with the
# timings of the run in captured/SUITE/timings.txt. Root only; boots and stops the VM itself.
#   slurm-conf/vm/capture.sh [trixie] [sid]     (default: both)
# io-off (SLURM's default controllers): the main job, then a cancelled, a timed-out and an
# OOM-killed job; io-on (vm.sh up --io on): the main job only.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
VM=$HERE/vm.sh
log() { echo "vm-capture: $*"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
[ $# -gt 0 ] || set -- trixie sid
rc=0
for suite in "$@"; do
  out=$HERE/captured/$suite
  share=$(bash "$VM" share "$suite")
  rm -rf --one-file-system "$out"; install -d "$out"
  t=$(now)
  bash "$HERE/image.sh" build "$suite" || { rc=1; continue; }
  echo "image_build_or_check_s=$(since "$t")" >"$out/timings.txt"
  for io in off on; do
    t0=$(now)
    if ! bash "$VM" up "$suite" --io "$io" --max-s 900; then rc=1; continue; fi
    echo "io_${io}_boot_to_ready_s=$(since "$t0")" >>"$out/timings.txt"
    t1=$(now)
    bash "$VM" run "$suite" --timeout 300 bash /mnt/jobscope/guest/capture.sh main || rc=1
    echo "io_${io}_main_job_submit_to_done_s=$(since "$t1")" >>"$out/timings.txt"
    echo "io_${io}_boot_to_main_job_done_s=$(since "$t0")" >>"$out/timings.txt"
    if [ "$io" = off ]; then
      t1=$(now)
      bash "$VM" run "$suite" --timeout 400 bash /mnt/jobscope/guest/capture.sh states || rc=1
      echo "io_off_states_jobs_s=$(since "$t1")" >>"$out/timings.txt"
    fi
    t1=$(now)
    bash "$VM" down "$suite"
    echo "io_${io}_poweroff_s=$(since "$t1")" >>"$out/timings.txt"
    echo "io_${io}_whole_boot_s=$(since "$t0")" >>"$out/timings.txt"
    install -d "$out/io-$io"
    cp -r "$share/out/capture/." "$out/io-$io/"
    # the daemons' logs and the journal stay out of the repository (large, timestamps); the
    # agent's log says what the guest did
    cp "$share/state/agent.log" "$out/io-$io/agent.log" 2>/dev/null || true
  done
  log "$suite: $(tr '\n' ' ' <"$out/timings.txt")"
done
exit $rc
