#!/bin/bash
# Runs in the guest, as root (slurm-conf/vm/run-suite.sh queues it through vm.sh run):
#
#   suite.sh install     installs jobscope as the host's test cluster has it (slurm-conf/cluster.sh
#                        install --packages): the .debs the host put in the share's files/debs/
#                        (jobscope and the plugin package for this release) with apt, /usr/local's
#                        paths linked to the packaged files, the test-only fault-injection plugin
#                        and fake NVML from files/, /etc/jobscope/jobscope.toml from the repository's
#                        slurm-conf/jobscope.toml, the plugstack line; then restarts slurmd
#   suite.sh test LIST   runs each test of LIST (lines "BINARY TEST-NAME", the cluster test binaries
#                        built on the host, seen through the read-only repository share) in a process
#                        of its own, one at a time, as nextest would; writes out/suite/<name>.log and a
#                        line per test to out/suite/results.txt; exits 1 if any failed
set -uo pipefail
S=/mnt/jobscope
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH LANG=C.UTF-8
# shellcheck disable=SC1091
. "$S/config.env"
log() { echo "suite: [$(cut -d' ' -f1 /proc/uptime)] $*"; }
die() { log "ERROR: $*"; exit 1; }

node_idle() { [ "$(timeout 5 sinfo -h -N -o '%T' 2>/dev/null | head -n1)" = idle ]; }

cmd_install() {
  local debs=() d f
  for d in "$S"/files/debs/*.deb; do [ -f "$d" ] && debs+=("$d"); done
  [ "${#debs[@]}" -eq 2 ] || die "expected the jobscope and jobscope-spank-slurm .debs in $S/files/debs (found ${#debs[@]})"
  # From local files only: the guest has no network, and every dependency is in the image. (apt
  # with --no-download looks for them in its cache, "Pathname to install is not absolute": they are
  # copied to local files; nothing is downloaded when every dependency is installed.)
  rm -rf /root/debs; mkdir -p /root/debs; cp "${debs[@]}" /root/debs/
  # The package's postinst starts its timers and restarts the collector through systemctl, whose
  # jobs wait behind the boot's own start jobs: the guest answers once slurmd is up, which can be
  # before its boot is done (one install under emulation hung there past its 300 s). Wait for the
  # boot, bounded, and say what was still queued if it did not end.
  log "boot: $(timeout 150 systemctl is-system-running --wait 2>&1)"
  jobs=$(systemctl list-jobs --no-legend 2>/dev/null | head -n 5 | tr -s ' \n' ' ')
  [ -z "$jobs" ] || log "systemd jobs still queued before the install: $jobs"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q -o Dpkg::Options::=--force-confdef \
    -o Dpkg::Options::=--force-confold /root/debs/*.deb || die "apt-get install ${debs[*]} failed"
  for f in /usr/lib/x86_64-linux-gnu/slurm-wlm/jobscope_spank.so /usr/bin/jobscope /usr/sbin/jobscope-epilog; do
    dpkg -S "$f" >/dev/null 2>&1 || die "$f is not from a package after the install"
  done
  install -d -m 0755 /usr/local/lib/slurm /usr/local/bin /usr/local/sbin /usr/local/lib/jobscope-test
  ln -sfn /usr/lib/x86_64-linux-gnu/slurm-wlm/jobscope_spank.so /usr/local/lib/slurm/jobscope_spank.so
  ln -sfn /usr/bin/jobscope /usr/local/bin/jobscope
  ln -sfn /usr/sbin/jobscope-epilog /usr/local/sbin/jobscope-epilog
  # test-only files, which no package has
  [ -f "$S/files/jobscope_spank_faults.so" ] && install -m 0755 "$S/files/jobscope_spank_faults.so" /usr/local/lib/slurm/
  [ -f "$S/files/libfake_nvml.so" ] && install -m 0755 "$S/files/libfake_nvml.so" /usr/local/lib/jobscope-test/
  # pyarrow for the audit test (run-suite.sh downloaded the host venv's release for this python)
  for f in "$S"/files/pyarrow-*.whl; do
    [ -f "$f" ] || continue
    # Debian's python3 looks in /usr/local/lib/python3.N/dist-packages
    python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall("/usr/local/lib/python3.%d/dist-packages" % sys.version_info[1])' \
      "$f" || die "cannot unpack $f"
    python3 -c 'import pyarrow.parquet' || die "pyarrow from $f does not import"
  done
  # A user manager (user@UID.service) for `systemd-run --user` (tests/cluster/tests/run_v2.rs): the
  # image has no pam_systemd, which would give it its XDG_RUNTIME_DIR in a login session.
  install -d -m 0755 /etc/systemd/system/user@.service.d
  printf '[Service]\nEnvironment=XDG_RUNTIME_DIR=/run/user/%%i\n' >/etc/systemd/system/user@.service.d/jobscope-vm.conf
  systemctl daemon-reload
  # The kernel collector: the package's service (enabled and started by its postinst), with
  # system-call counting turned on the way docs/kernel.md tells a site to, by a drop-in; the
  # kernel-view tests count system calls and small reads and writes.
  install -d -m 0755 /etc/systemd/system/jobscope-kernel.service.d
  printf '[Service]\nExecStart=\nExecStart=/usr/sbin/jobscope-kernel run --optional --syscalls\n' \
    >/etc/systemd/system/jobscope-kernel.service.d/syscalls.conf
  systemctl daemon-reload
  systemctl restart jobscope-kernel.service || log "jobscope-kernel.service did not start: $(systemctl status jobscope-kernel.service 2>&1 | tail -n 5)"
  for _ in $(seq 1 100); do [ -e /sys/fs/bpf/jobscope/state ] && break; sleep 0.2; done
  log "kernel collector: $(/usr/sbin/jobscope-kernel status 2>&1 | tr -s ' \n' ' ')"
  install -D -m 0644 "$JOBSCOPE_VM_REPO/slurm-conf/jobscope.toml" /etc/jobscope/jobscope.toml
  printf 'optional /usr/local/lib/slurm/jobscope_spank.so\n' >/etc/slurm/plugstack.conf.d/jobscope.conf
  systemctl restart slurmd.service || die "slurmd did not restart"
  for _ in $(seq 1 300); do node_idle && break; sleep 0.2; done
  node_idle || die "node not idle 60 s after restarting slurmd"
  log "installed: $(dpkg-query -W -f '${db:Status-Abbrev} ${Package} ${Version}\n' jobscope 'jobscope-spank-slurm*' 2>/dev/null | awk '$1 == "ii" { printf "%s %s, ", $2, $3 }')SLURM $(sinfo -V | awk '{print $2}')"
}

cmd_test() {
  local list=$1 bin name t0 rc failed=0 n=0 out=$S/out/suite
  [ -f "$list" ] || die "no test list $list"
  mkdir -p "$out"
  : >"$out/results.txt"
  while read -r bin name; do
    [ -n "$name" ] || continue
    n=$((n + 1))
    t0=$(date +%s.%N)
    # the same environment as nextest gives them on the host, less JOBSCOPE_SLURM (this is the
    # guest's own SLURM); every test holds the cluster lock itself
    ( cd "$JOBSCOPE_VM_REPO/tests/cluster" && env -i PATH="$PATH" LANG=C.UTF-8 HOME=/root RUST_LIB_BACKTRACE=0 \
        JOBSCOPE_TEST_IO_BURST=300 timeout -k 10 1200 "$bin" --exact "$name" --test-threads 1 --nocapture ) >"$out/$name.log" 2>&1 </dev/null
    rc=$?
    dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    if [ "$rc" = 0 ] && grep -q '^test result: ok. 1 passed' "$out/$name.log"; then
      echo "PASS ${dt}s $name" | tee -a "$out/results.txt"
    else
      failed=$((failed + 1))
      echo "FAIL ${dt}s $name (exit $rc)" | tee -a "$out/results.txt"
      tail -n 40 "$out/$name.log"
    fi
  done <"$list"
  log "$n tests, $failed failed"
  [ "$n" -gt 0 ] && [ "$failed" = 0 ]
}

case "${1:-}" in
  install) cmd_install ;;
  test) cmd_test "${2:-}" ;;
  *) echo "usage: $0 install | test LIST" >&2; exit 2 ;;
esac
