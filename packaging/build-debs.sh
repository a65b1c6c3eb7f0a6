#!/bin/bash
# Builds jobscope's Debian packages and checks them with lintian (docs/packaging.md).
#
#   packaging/build-debs.sh [--no-build] [--slurm 22.05|24.11|26.05]
#
# Writes target/debian/jobscope_<version>-1_amd64.deb (the CLI and the Epilog, config, timers, man
# pages, completions) and target/debian/jobscope-spank-slurm22.05_<version>-1_amd64.deb (the SPANK
# plugin for SLURM 22.05), then runs lintian on both: it fails on any lintian error and prints
# every warning. --no-build packages what `cargo build --release --workspace` already built.
# Needs cargo-deb (slurm-conf/install-deps.sh installs it), lintian, and SLURM 22.05's headers.
# --slurm 24.11: only the plugin, built against SLURM 24.11's headers (the Debian 13 root filesystem
# of slurm-conf/trixie/rootfs.sh) in target/slurm-24.11, packaged as
# target/slurm-24.11/debian/jobscope-spank-slurm24.11_<version>-1_amd64.deb (the jobscope package is
# the same for every release); --no-build packages what `slurm-conf/trixie/cluster.sh build` built.
# --slurm 26.05: the same for SLURM 26.05, from the headers of the sid VM image (slurm-conf/vm/image.sh
# build sid) into target/slurm-26.05 (slurm-conf/vm/build-plugin.sh sid), packaged as
# jobscope-spank-slurm26.05.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
command -v cargo >/dev/null 2>&1 || export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
TARGET=${CARGO_TARGET_DIR:-$REPO/target}
build=1 slurm=22.05
while [ $# -gt 0 ]; do
  case "$1" in
    --no-build) build=0 ;;
    --slurm) slurm=${2:-}; shift ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build-debs: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
die() { echo "build-debs: $*" >&2; exit 1; }
cargo deb --version >/dev/null 2>&1 || die "cargo-deb is missing: cargo install --locked cargo-deb (or slurm-conf/install-deps.sh)"
command -v lintian >/dev/null || die "lintian is missing: apt-get install lintian (or slurm-conf/install-deps.sh)"

# plugin_version <so>: the SPANK plugin_version the .so exports (what SLURM compares with itself)
# lint DEB...: lintian with its information tags shown; any error fails the build.
lint() {
  echo "== lintian"
  local rc=0
  lintian --info --display-info --fail-on error "$@" || rc=$?
  [ "$rc" = 0 ] || die "lintian reports errors (above)"
}
# no_fault_injection <so>: refuses a plugin built with the fault-injection feature (the cluster tests'
# jobscope_spank_faults.so; plugin/Cargo.toml), which marks itself with an exported symbol.
no_fault_injection() {
  local syms
  syms=$(objdump -T "$1") || die "cannot read the dynamic symbols of $1"
  if grep -qw jobscope_fault_injection <<<"$syms"; then
    die "$1 is built with the fault-injection feature: rebuild without it (cargo build --release --workspace)"
  fi
}
# no_bench <jobscope-kernel>: refuses a collector built with the `bench` feature (kernel/Cargo.toml:
# the hidden benchmark and test workloads), which then knows the `bench` subcommand.
no_bench() {
  if "$1" bench --help >/dev/null 2>&1; then
    die "$1 is built with the bench feature: rebuild without it (cargo build --release --workspace)"
  fi
}
plugin_version() {
  python3 - "$1" <<'PY'
import struct, subprocess, sys
so = sys.argv[1]
addr = None
for l in subprocess.run(["objdump", "-T", so], capture_output=True, text=True, check=True).stdout.splitlines():
    f = l.split()
    if f and f[-1] == "plugin_version":
        addr = int(f[0], 16)
if addr is None:
    sys.exit("no plugin_version symbol in " + so)
for l in subprocess.run(["objdump", "-h", so], capture_output=True, text=True, check=True).stdout.splitlines():
    f = l.split()
    if len(f) >= 6 and f[0].isdigit():
        vma, size, off = int(f[3], 16), int(f[2], 16), int(f[5], 16)
        if vma <= addr < vma + size:
            with open(so, "rb") as fh:
                fh.seek(off + addr - vma)
                print("0x%x" % struct.unpack("<I", fh.read(4))[0])
            sys.exit(0)
sys.exit("plugin_version is in no section of " + so)
PY
}

case "$slurm" in
  22.05) ;;
  24.11|26.05)
    # Only the plugin depends on SLURM's headers (docs/slurm-versions.md): it is built in a target
    # directory of its own, from that release's headers, and checked to carry its version.
    if [ "$slurm" = 24.11 ]; then
      tdir=${JOBSCOPE_TARGET_24_11:-$REPO/target/slurm-24.11}
      root=$(bash "$REPO/slurm-conf/trixie/rootfs.sh" path)
      make_root="slurm-conf/trixie/rootfs.sh build"
      builder=(bash "$REPO/slurm-conf/trixie/cluster.sh" build)
    else
      tdir=${JOBSCOPE_TARGET_26_05:-$REPO/target/slurm-26.05}
      root=$(bash "$REPO/slurm-conf/vm/image.sh" path sid)/rootfs
      make_root="slurm-conf/vm/image.sh build sid"
      builder=(bash "$REPO/slurm-conf/vm/build-plugin.sh" sid)
    fi
    variant=slurm$slurm
    h=$root/usr/include/slurm/slurm_version.h
    [ -f "$h" ] || die "$h missing: run $make_root"
    num=$(awk '$2 == "SLURM_VERSION_NUMBER" { print $3 }' "$h")
    [ "$(printf '%d.%02d' $(( num >> 16 )) $(( (num >> 8) & 0xff )))" = "$slurm" ] || die "$h is not SLURM $slurm ($num)"
    if [ "$build" = 1 ]; then "${builder[@]}"; fi
    so=$tdir/release/libjobscope_spank.so
    [ -f "$so" ] || die "$so missing: run ${builder[*]}"
    v=$(plugin_version "$so") || die "cannot read plugin_version from $so"
    [ "$(( v ))" = "$(( num ))" ] || die "$so exports plugin_version $v, the headers say $num: rebuild (${builder[*]})"
    no_fault_injection "$so"
    rm -f "$tdir"/debian/jobscope-spank-slurm*.deb
    CARGO_TARGET_DIR=$tdir cargo deb -p jobscope-plugin --variant "$variant" --no-build --strip \
      --output "$tdir/debian/"
    deb=$(ls "$tdir"/debian/jobscope-spank-"$variant"_*.deb)
    echo "== $deb (plugin_version $v)"
    dpkg-deb --info "$deb" | sed -n '/Package:/,$p'
    dpkg-deb --contents "$deb" | awk '{ print "  " $1, $2, $6, $7, $8 }'
    # the stripped .so in the package is the one checked above
    x=$(mktemp -d); dpkg-deb -x "$deb" "$x"
    pv=$(plugin_version "$x/usr/lib/x86_64-linux-gnu/slurm-wlm/jobscope_spank.so"); rm -rf "$x"
    [ "$(( pv ))" = "$(( num ))" ] || die "the packaged plugin exports plugin_version $pv, not $num"
    lint "$deb"
    echo "build-debs: $deb"
    exit 0 ;;
  *) die "--slurm takes 22.05, 24.11 or 26.05, not '$slurm'" ;;
esac

# The plugin package is named for the SLURM release whose headers it is built against.
h=/usr/include/slurm/slurm_version.h
[ -f "$h" ] || die "$h missing: apt-get install libslurm-dev"
num=$(awk '$2 == "SLURM_VERSION_NUMBER" { print $3 }' "$h")
release=$(printf '%d.%02d' $(( num >> 16 )) $(( (num >> 8) & 0xff )))
[ "$release" = 22.05 ] || die "the headers in $h are SLURM $release; plugin/Cargo.toml packages the plugin as jobscope-spank-slurm22.05 (see docs/packaging.md for another release)"

if [ "$build" = 1 ]; then
  cargo build --release -p jobscope-cli -p jobscope-epilog -p jobscope-kernel -p jobscope-plugin -p jobscope-xtask
fi
for f in jobscope jobscope-epilog jobscope-kernel libjobscope_spank.so jobscope-xtask; do
  [ -f "$TARGET/release/$f" ] || die "$TARGET/release/$f missing: run cargo build --release --workspace"
done
no_fault_injection "$TARGET/release/libjobscope_spank.so"
no_bench "$TARGET/release/jobscope-kernel"

docs=$TARGET/release/jobscope-docs
rm -rf "$docs"
"$TARGET/release/jobscope-xtask" gen "$docs" --docs "$REPO/docs"
gzip -9n "$docs"/man/*

rm -f "$TARGET"/debian/jobscope_*.deb "$TARGET"/debian/jobscope-spank-slurm*.deb
cargo deb -p jobscope-cli --no-build --strip
cargo deb -p jobscope-plugin --no-build --strip
debs=("$TARGET"/debian/jobscope_*.deb "$TARGET"/debian/jobscope-spank-slurm22.05_*.deb)
for d in "${debs[@]}"; do
  echo "== $d"
  dpkg-deb --info "$d" | sed -n '/Package:/,$p'
  dpkg-deb --contents "$d" | awk '{ print "  " $1, $2, $6, $7, $8 }'
done

lint "${debs[@]}"
echo "build-debs: ${debs[*]}"
