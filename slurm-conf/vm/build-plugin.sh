#!/bin/bash
# Builds the SPANK plugin against the SLURM headers of a VM image's root filesystem, in a target
# directory of its own (build.rs refuses a target directory built for other headers):
#
#   slurm-conf/vm/build-plugin.sh sid [--faults]   SLURM 26.05 -> target/slurm-26.05 ($JOBSCOPE_TARGET_26_05)
#
# The plugin that is packaged (packaging/build-debs.sh --slurm 26.05) and installed. With --faults,
# first the same with the fault-injection feature, kept as jobscope_spank_faults.so for the cluster
# tests' inject= cases (the 26.05 suite has none: tests/cluster/suites.sh; the plugin crate would
# be compiled twice). (24.11's plugin comes from
# slurm-conf/trixie/cluster.sh build, against the trixie rootfs's headers; the trixie VM runs it.)
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
command -v cargo >/dev/null 2>&1 || export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
die() { echo "vm build-plugin: ERROR: $*" >&2; exit 1; }
case "${1:-}" in
  sid) target=${JOBSCOPE_TARGET_26_05:-$REPO/target/slurm-26.05} ;;
  *) die "usage: $0 sid [--faults]" ;;
esac
faults=0; [ "${2:-}" = --faults ] && faults=1
inc=$(bash "$HERE/image.sh" path "$1")/rootfs/usr/include
[ -f "$inc/slurm/spank.h" ] || die "no SLURM headers at $inc: run slurm-conf/vm/image.sh build $1"
t0=$(date +%s)
cd "$REPO"
# The crates that read no SLURM header are the same for every release: a new target directory
# starts from 24.11's build of them (slurm-conf/trixie/cluster.sh build), less slurm-spank, whose
# bindgen bindings are the headers' own (its build script would not rerun), and the plugin. Saves
# compiling bindgen and the rest again (minutes on 2 cores).
seed=${JOBSCOPE_TARGET_24_11:-$REPO/target/slurm-24.11}/release
if [ ! -e "$target/release" ] && [ -d "$seed" ]; then
  mkdir -p "$target"
  cp -a "$seed" "$target/"
  ( cd "$target/release" && rm -rf jobscope-slurm-headers incremental .fingerprint/slurm-spank-* \
      .fingerprint/jobscope-plugin-* build/slurm-spank-* build/jobscope-plugin-* deps/*slurm_spank* \
      deps/*jobscope_spank* libjobscope_spank.* jobscope_spank_faults.so )
  echo "vm build-plugin: $target seeded from $seed (all but slurm-spank and the plugin)"
fi
export JOBSCOPE_SLURM_INCLUDE="$inc" BINDGEN_EXTRA_CLANG_ARGS="-I$inc" CARGO_TARGET_DIR="$target"
if [ "$faults" = 1 ]; then
  cargo build --release -p jobscope-plugin --features fault-injection
  cp "$target/release/libjobscope_spank.so" "$target/release/jobscope_spank_faults.so"
fi
cargo build --release -p jobscope-plugin
echo "vm build-plugin: built $target/release/libjobscope_spank.so$([ "$faults" = 1 ] && echo ' and jobscope_spank_faults.so') against $inc ($(( $(date +%s) - t0 )) s)"
