#!/bin/bash
# Runs the cluster tests in the VM test cluster (SLURM on cgroup v2), against the installed packages:
#
#   slurm-conf/vm/run-suite.sh SUITE [--io on|off] [--cgroup-conf KEY=VALUE]... [-E FILTER]
#
# SUITE: trixie (SLURM 24.11, the plugin package of packaging/build-debs.sh --slurm 24.11) or sid
# (SLURM 26.05, build-debs.sh --slurm 26.05). It needs, built on this host: target/debian/jobscope_*.deb,
# the plugin package of the release (target/slurm-24.11 or target/slurm-26.05; its fault-injection
# plugin too where a test of the suite injects faults),
# target/release/libfake_nvml.so, and the cluster and CLI test binaries (tests/run-all.sh's unit
# phase builds them; `cargo nextest list` below finds them).
#
# Steps: image.sh build SUITE (cached) -> vm.sh up -> the .debs and test-only files into the share
# -> guest/suite.sh install (apt, in the guest) -> guest/suite.sh test (each test in a process of
# its own, one at a time) -> vm.sh down (always; qemu by its pid file). The results and each test's
# log are copied to target/vm-suite/SUITE/. Exit status 0 only if every test passed.
#
# -E FILTER: a nextest filter expression over the cluster tests and `jobscope run`'s tests
# (default: the suite's set in tests/cluster/suites.sh, which README's "Supported configurations"
# lists).
set -uo pipefail
# One compound command, parsed whole before it runs: an edit of this file while a suite runs does
# not make bash read on into the new text.
{
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
cd "$REPO" || exit 1
command -v cargo >/dev/null 2>&1 || export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
log() { echo "vm-suite: $*"; }
die() { echo "vm-suite: ERROR: $*" >&2; exit 1; }

# The tests each release runs here (VM_TRIXIE, VM_SID) and why: tests/cluster/suites.sh.
# shellcheck source=tests/cluster/suites.sh
. "$REPO/tests/cluster/suites.sh"

suite=${1:-}; shift || true
case "$suite" in
  trixie) rel=24.11; tdir=${JOBSCOPE_TARGET_24_11:-$REPO/target/slurm-24.11}; tests=$VM_TRIXIE ;;
  sid) rel=26.05; tdir=${JOBSCOPE_TARGET_26_05:-$REPO/target/slurm-26.05}; tests=$VM_SID ;;
  *) die "usage: $0 trixie|sid [--io on|off] [--cgroup-conf KEY=VALUE]... [-E FILTER]" ;;
esac
up_args=() filter=
while [ $# -gt 0 ]; do
  case "$1" in
    --io|--cgroup-conf) up_args+=("$1" "${2:-}"); shift 2 ;;
    -E) filter=${2:-}; shift 2 ;;
    *) die "unknown argument $1" ;;
  esac
done
[ -n "$filter" ] || filter=$(suite_filter "$tests")
[ "$(id -u)" = 0 ] || die "must run as root"

rel_dir=${CARGO_TARGET_DIR:-$REPO/target}
debs=("$rel_dir"/debian/jobscope_*.deb "$tdir"/debian/jobscope-spank-slurm"$rel"_*.deb)
for f in "${debs[@]}" "$rel_dir/release/libfake_nvml.so"; do
  [ -f "$f" ] || die "$f missing (tests/run-all.sh builds it; for $rel: packaging/build-debs.sh --slurm $rel)"
done
out=$rel_dir/vm-suite/$suite
rm -rf "$out"; mkdir -p "$out"

# The test binaries and names, from nextest's own list (the same filter language as the host's phases).
log "listing the tests: $filter"
cargo nextest list --workspace --release --message-format json -E "$filter" >"$out/list.json" 2>"$out/list.err" \
  || { cat "$out/list.err" >&2; die "cargo nextest list failed"; }
python3 - "$out/list.json" >"$out/tests.txt" <<'PY' || die "cannot read nextest's list"
import json, sys
suites = json.load(open(sys.argv[1]))["rust-suites"]
for s in suites.values():
    for name, case in s["testcases"].items():
        if case["filter-match"]["status"] == "matches" and not case.get("ignored"):
            print(s["binary-path"], name)
PY
n=$(wc -l <"$out/tests.txt")
[ "$n" -gt 0 ] || die "no test matches $filter"
log "$n tests"

t0=$(date +%s)
bash "$HERE/image.sh" build "$suite" || die "no image"
# pyarrow for the audit test's independent read of the Parquet output: the release of the host's
# venv (slurm-conf/install-deps.sh), as a wheel for the guest's python, downloaded once per machine
# (the guest has no network; Debian packages no pyarrow); suite.sh install unpacks it.
pyver=$(cd "$(bash "$HERE/image.sh" path "$suite")/rootfs/usr/bin" && ls python3.* 2>/dev/null | grep -E '^python3\.[0-9]+$' | sort -V | tail -n1)
pyver=${pyver#python}
pa=$(/opt/jobscope-pyenv/bin/python -c 'import pyarrow; print(pyarrow.__version__)' 2>/dev/null) \
  || die "no pyarrow in /opt/jobscope-pyenv (slurm-conf/install-deps.sh makes it)"
wheels=${JOBSCOPE_VM_CACHE:-/var/cache/jobscope-vm}/wheels/$pyver
whl=$(ls "$wheels"/pyarrow-"$pa"-*.whl 2>/dev/null | head -n1)
if [ -z "$whl" ]; then
  /opt/jobscope-pyenv/bin/pip download -q "pyarrow==$pa" --only-binary=:all: --python-version "$pyver" \
    --implementation cp --platform manylinux_2_28_x86_64 --no-deps -d "$wheels" || die "cannot download pyarrow $pa for python $pyver"
  whl=$(ls "$wheels"/pyarrow-"$pa"-*.whl | head -n1)
fi
trap 'bash "$HERE/vm.sh" down "$suite"' EXIT
bash "$HERE/vm.sh" up "$suite" "${up_args[@]}" || die "the VM did not come up"
t_up=$(date +%s)
share=$(bash "$HERE/vm.sh" share "$suite")
install -d "$share/files/debs"
install -m 0644 "${debs[@]}" "$share/files/debs/"
install -m 0755 "$rel_dir/release/libfake_nvml.so" "$share/files/"
# the fault-injection plugin of this release, where it was built (the inject= tests need it)
[ -f "$tdir/release/jobscope_spank_faults.so" ] && install -m 0755 "$tdir/release/jobscope_spank_faults.so" "$share/files/"
install -m 0644 "$out/tests.txt" "$whl" "$share/files/"
bash "$HERE/vm.sh" run "$suite" --timeout 450 bash /mnt/jobscope/guest/suite.sh install || die "install in the guest failed"
rc=0
bash "$HERE/vm.sh" run "$suite" --timeout 3600 bash /mnt/jobscope/guest/suite.sh test /mnt/jobscope/files/tests.txt || rc=1
cp -r "$share/out/suite/." "$out/" 2>/dev/null || true
t_end=$(date +%s)
# what the guest cost the host: qemu's CPU time (utime + stime, in clock ticks) over the run
qpid=$(cat "/run/jobscope-vm/$suite/qemu.pid" 2>/dev/null || true)
qcpu=$(awk -v hz="$(getconf CLK_TCK)" '{ printf "%.0f", ($14 + $15) / hz }' "/proc/$qpid/stat" 2>/dev/null || echo "?")
bash "$HERE/vm.sh" down "$suite"; trap - EXIT
cp -r "$share/state/logs" "$out/daemon-logs" 2>/dev/null || true
log "$suite (SLURM $rel, cgroup v2${up_args[*]:+, ${up_args[*]}}): boot $(( t_up - t0 )) s, install and tests $(( t_end - t_up )) s, qemu CPU ${qcpu} s; results in $out/results.txt"
cat "$out/results.txt" 2>/dev/null
exit $rc
}
