#!/bin/bash
# Builds jobscope's Debian packages and checks them with lintian (docs/packaging.md).
#
#   packaging/build-debs.sh [--no-build]
#
# Writes target/debian/jobscope_<version>-1_amd64.deb (the CLI and the Epilog, config, timers, man
# pages, completions) and target/debian/jobscope-spank-slurm22.05_<version>-1_amd64.deb (the SPANK
# plugin for SLURM 22.05), then runs lintian on both: it fails on any lintian error and prints
# every warning. --no-build packages what `cargo build --release --workspace` already built.
# Needs cargo-deb (slurm-conf/install-deps.sh installs it), lintian, and SLURM 22.05's headers.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
command -v cargo >/dev/null 2>&1 || export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
TARGET=${CARGO_TARGET_DIR:-$REPO/target}
build=1
for a in "$@"; do
  case "$a" in
    --no-build) build=0 ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build-debs: unknown argument $a" >&2; exit 2 ;;
  esac
done
die() { echo "build-debs: $*" >&2; exit 1; }
cargo deb --version >/dev/null 2>&1 || die "cargo-deb is missing: cargo install --locked cargo-deb (or slurm-conf/install-deps.sh)"
command -v lintian >/dev/null || die "lintian is missing: apt-get install lintian (or slurm-conf/install-deps.sh)"

# The plugin package is named for the SLURM release whose headers it is built against.
h=/usr/include/slurm/slurm_version.h
[ -f "$h" ] || die "$h missing: apt-get install libslurm-dev"
num=$(awk '$2 == "SLURM_VERSION_NUMBER" { print $3 }' "$h")
release=$(printf '%d.%02d' $(( num >> 16 )) $(( (num >> 8) & 0xff )))
[ "$release" = 22.05 ] || die "the headers in $h are SLURM $release; plugin/Cargo.toml packages the plugin as jobscope-spank-slurm22.05 (see docs/packaging.md for another release)"

if [ "$build" = 1 ]; then
  cargo build --release -p jobscope-epilog -p jobscope-plugin -p jobscope-xtask
fi
for f in jobscope jobscope-epilog libjobscope_spank.so jobscope-xtask; do
  [ -f "$TARGET/release/$f" ] || die "$TARGET/release/$f missing: run cargo build --release --workspace"
done

docs=$TARGET/release/jobscope-docs
rm -rf "$docs"
"$TARGET/release/jobscope-xtask" gen "$docs" --docs "$REPO/docs"
gzip -9n "$docs"/man/*

rm -f "$TARGET"/debian/jobscope_*.deb "$TARGET"/debian/jobscope-spank-slurm*.deb
cargo deb -p jobscope-epilog --no-build --strip
cargo deb -p jobscope-plugin --no-build --strip
debs=("$TARGET"/debian/jobscope_*.deb "$TARGET"/debian/jobscope-spank-slurm22.05_*.deb)
for d in "${debs[@]}"; do
  echo "== $d"
  dpkg-deb --info "$d" | sed -n '/Package:/,$p'
  dpkg-deb --contents "$d" | awk '{ print "  " $1, $2, $6, $7, $8 }'
done

echo "== lintian"
set +e
lintian --info --display-info --fail-on error "${debs[@]}"
rc=$?
set -e
[ "$rc" = 0 ] || die "lintian reports errors (above)"
echo "build-debs: ${debs[*]}"
